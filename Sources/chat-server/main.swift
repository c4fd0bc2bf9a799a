// Serving is parsed by `ChatServerTool.route` (the config file's flags go before the command
// line's); every other command by ArgumentParser. Synchronous on purpose: an async top level
// starts Swift's concurrency runtime on the main thread, under which valgrind 3.19 (the
// benchmarks' callgrind) crashes before `main` runs.
ChatServerTool.route(Array(CommandLine.arguments.dropFirst()))
