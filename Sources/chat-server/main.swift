// `chat-server account …` is its own command (AccountCommand.swift): as a subcommand of this
// one, this one's --data-dir and --password-file would take the account command's options.
// (Temporary wiring until the root command is split into subcommands.)
if CommandLine.arguments.dropFirst().first == "account" {
    AccountCommand.main(Array(CommandLine.arguments.dropFirst(2)))
} else {
    ChatServerCommand.main()
}
