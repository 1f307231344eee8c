from scaling.cli import main

main()
