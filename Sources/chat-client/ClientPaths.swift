import Foundation
import Glibc

/// Where the client keeps its files, after the XDG base directory rules: the config in
/// `$XDG_CONFIG_HOME/chat-client` (else `~/.config/chat-client`), logs in
/// `$XDG_DATA_HOME/chat-client/logs` (else `~/.local/share/chat-client/logs`).
enum ClientPaths {
    /// The config file's path, or nil when neither variable nor HOME is set.
    static func configFile() -> String? {
        base("XDG_CONFIG_HOME", fallback: ".config").map { $0 + "/chat-client/config.toml" }
    }

    /// The log directory (`~/.local/share/chat-client/logs` unless XDG_DATA_HOME says otherwise).
    static func logDirectory() -> String {
        (base("XDG_DATA_HOME", fallback: ".local/share") ?? ".") + "/chat-client/logs"
    }

    /// `path` with a leading `~/` read as the home directory.
    static func expandingTilde(_ path: String) -> String {
        guard path.hasPrefix("~/"), let home = ProcessInfo.processInfo.environment["HOME"] else { return path }
        return home + path.dropFirst()
    }

    /// Writes `text` to a new file of mode 0600 beside `path` and renames it over `path`, so the
    /// file is never half written; creates the directory (0700) first.
    static func write(_ text: String, to path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let temporary = path + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
    }

    private static func base(_ variable: String, fallback: String) -> String? {
        let environment = ProcessInfo.processInfo.environment
        if let value = environment[variable], !value.isEmpty { return value }
        guard let home = environment["HOME"], !home.isEmpty else { return nil }
        return home + "/" + fallback
    }
}
