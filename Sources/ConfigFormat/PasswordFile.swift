import Glibc

/// Reads a password from a file named on the command line or in a config file, so that it is
/// never on the command line itself. Shared by `chat-server` (`--password-file`, `account
/// --password-file`) and `chat-client` (`--password-file`, `--account-password-file`).
///
/// Read with read(2) rather than Foundation: `String(contentsOfFile:)` refuses what is not a
/// regular file, and a password manager's pipe (`--password-file <(pass show chat)`, a
/// `/dev/fd` path) or a FIFO is the usual way to hand over a secret without writing it to disk.
public enum PasswordFile {
    /// Why a password file could not be read: the system's own words, such as "No such file or
    /// directory".
    public struct Unreadable: Error, CustomStringConvertible, Sendable {
        /// The reason, from `strerror`.
        public let description: String
    }

    /// The first line of the file at `path`, without its line ending (`\n` or `\r\n`); empty for
    /// an empty file. Only that line is read: a pipe's writer may go on, or never close.
    public static func firstLine(of path: String) throws(Unreadable) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Unreadable(description: String(cString: strerror(errno))) }
        defer { close(descriptor) }
        return firstLine(readingFrom: descriptor) ?? ""
    }

    /// One line from `descriptor` without its line ending, read a byte at a time so that nothing
    /// after it is consumed (standard input, a terminal); nil at end of input before any byte. A
    /// read error ends the line as the end of input does.
    public static func firstLine(readingFrom descriptor: Int32) -> String? {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let count = read(descriptor, &byte, 1)
            if count < 0, errno == EINTR { continue }
            if count <= 0 {
                if bytes.isEmpty { return nil }
                break
            }
            if byte == 0x0A { break }
            bytes.append(byte)
        }
        if bytes.last == 0x0D { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }
}
