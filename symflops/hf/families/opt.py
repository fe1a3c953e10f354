"""(Being written: see the README, Hugging Face configs.)"""

FAMILIES: tuple = ()
