"""Training and serving plans: models from declarations and Hugging Face configs,
accelerators, the plan's arithmetic, its reports and plots."""
