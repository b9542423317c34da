"""The demonstration course's tests (of the kit, and of this course's assignments)."""
from pathlib import Path

# This checkout: the kit's source (the editable install) and the demonstration course at once.
KIT_ROOT = Path(__file__).resolve().parents[1]
