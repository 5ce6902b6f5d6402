from gpuctl.cli.entry import main

main()
