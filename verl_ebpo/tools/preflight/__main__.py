import sys

from verl_ebpo.tools.preflight import main

sys.exit(main())
