from netdoctor.cli import main

main()
