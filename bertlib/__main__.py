"""`python -m bertlib`: the command line."""

from bertlib.cli.main import main

raise SystemExit(main())
