from tinytrain.cli.main import main

main()
