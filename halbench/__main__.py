from halbench.cli import main

main()
