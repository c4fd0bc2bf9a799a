ChatServerCommand.main()
