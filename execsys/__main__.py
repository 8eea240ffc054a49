from execsys.cli import main

raise SystemExit(main())
