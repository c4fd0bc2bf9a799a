// Serving is parsed by `ChatServerTool.route` (the config file's flags go before the command
// line's); every other command by ArgumentParser.
await ChatServerTool.route(Array(CommandLine.arguments.dropFirst()))
