"""``python -m gpipe_repro`` is ``gpipe-run``."""

from .cli import main

main()
