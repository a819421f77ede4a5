"""`python -m bertlib`: the command line."""

from bertlib.cli import main

raise SystemExit(main())
