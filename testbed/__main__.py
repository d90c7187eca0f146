"""`python3 -m testbed` runs the `testbed` command (a checkout without the installed script)."""

from testbed.cli import main

main()
