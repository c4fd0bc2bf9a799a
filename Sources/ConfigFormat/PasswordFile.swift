import Glibc

/// Reads a password from a file named on the command line or in a config file, so that it is
/// never on the command line itself. Shared by `chat-server` (`--password-file`, `account
/// --password-file`) and `chat-client` (`--password-file`, `--account-password-file`).
///
/// Read with stdio rather than Foundation: `String(contentsOfFile:)` refuses what is not a
/// regular file, and a password manager's pipe (`--password-file <(pass show chat)`, a
/// `/dev/fd` path) or a FIFO is the usual way to hand over a secret without writing it to disk.
public enum PasswordFile {
    /// Why a password file could not be read: the system's own words, such as "No such file or
    /// directory".
    public struct Unreadable: Error, CustomStringConvertible, Sendable {
        /// The reason, from `strerror`.
        public let description: String
    }

    /// The first line of the file at `path`, without its line ending (`\n` or `\r\n`). Only that
    /// line is read: a pipe's writer may go on, or never close.
    public static func firstLine(of path: String) throws(Unreadable) -> String {
        guard let file = fopen(path, "re") else { throw Unreadable(description: String(cString: strerror(errno))) }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        while true {
            let byte = getc(file)
            if byte == EOF || byte == 0x0A { break }
            bytes.append(UInt8(truncatingIfNeeded: byte))
        }
        if ferror(file) != 0 { throw Unreadable(description: String(cString: strerror(errno))) }
        if bytes.last == 0x0D { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }
}
