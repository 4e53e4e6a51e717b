from harness_run.cli import main

raise SystemExit(main())
