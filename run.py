"""Start Exactly: ``python run.py [--data-dir DIR] [--host H] [--kafka-port P]
[--http-port P] [--config key=value ...]`` (the same as ``exactly serve``)."""

import sys

from exactly.app.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
