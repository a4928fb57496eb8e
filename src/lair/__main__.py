from lair.cli import main

raise SystemExit(main())
