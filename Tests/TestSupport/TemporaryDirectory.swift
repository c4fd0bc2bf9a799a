import Foundation
import Glibc

/// A fresh directory under /tmp for one test's files, removed with its contents by `remove()`.
public struct TemporaryDirectory: Sendable {
    /// Its absolute path.
    public let path: String

    /// Makes `/tmp/<prefix>-XXXXXX` (mkdtemp: a new name, mode 700).
    public init(prefix: String) throws {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        path = String(cString: made)
    }

    /// Removes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
