from parity.run import main

main()
