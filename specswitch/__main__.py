from specswitch.cli import main

raise SystemExit(main())
