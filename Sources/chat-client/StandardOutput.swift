import Glibc

/// Writes to file descriptor 1 directly.
///
/// libedit writes through a `FILE` of its own; `TerminalEditor` flushes that before it writes
/// here, and writes only on its own thread, so the two never interleave. (The C `stdout` global
/// is not concurrency-safe in Swift 6.)
enum StandardOutput {
    /// Writes all of `text`, retrying after interruptions; gives up silently if stdout is gone,
    /// since there is no one left to tell.
    static func write(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if written > 0 {
                bytes = bytes.dropFirst(written)
            } else if written < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}
