import Glibc

/// Writes `text` and a newline straight to `descriptor` with `write(2)`.
///
/// Unbuffered on purpose: whoever reads our output through a pipe (a script, a test) must see each
/// line as soon as it is written, and Swift 6 does not let us touch C's global `stdout` to make
/// stdio line-buffered.
func writeLine(_ text: String, to descriptor: Int32 = STDOUT_FILENO) {
    var bytes = Array((text + "\n").utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written < 0 {
            if errno == EINTR { continue }
            return
        }
        bytes = bytes.dropFirst(written)
    }
}
