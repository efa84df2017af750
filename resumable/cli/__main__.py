"""``python -m resumable.cli``: how the dev supervisor, the demo and the tests
spawn processes, exactly as the console script would run them."""

from resumable.cli.main import main

main()
