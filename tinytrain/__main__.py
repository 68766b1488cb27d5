from tinytrain.cli import main

main()
