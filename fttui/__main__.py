import sys

from fttui.cli.main import main

sys.exit(main())
