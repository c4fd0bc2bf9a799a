import Glibc

/// The directory a server keeps its rooms in, held for the server's lifetime.
///
/// Opening creates the directory (mode 0700) if it is missing, checks that the server may write
/// it, and takes an exclusive `flock` on its `lock` file, so a second server on the same
/// directory is refused at start instead of numbering the same rooms twice. Owns the lock file's
/// descriptor and closes it (releasing the lock) in `deinit`; the OS releases it if the process
/// dies.
public final class DataDirectory: Sendable {
    /// The directory.
    public let path: String
    private let lockDescriptor: Int32

    /// Opens `path`, creating it and its missing parents. Throws a `StorageError` that names the
    /// directory and the reason.
    public init(path: String) throws(StorageError) {
        self.path = path
        try Self.makeDirectories(path)
        guard access(path, W_OK | X_OK) == 0 else {
            throw StorageError("data directory \(path) is not writable: \(Self.errnoText())")
        }
        let lockPath = path + "/lock"
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw StorageError("cannot open \(lockPath): \(Self.errnoText())")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let problem = errno == EWOULDBLOCK ? "another chat-server is using it" : Self.errnoText()
            close(descriptor)
            throw StorageError("data directory \(path) is locked: \(problem)")
        }
        lockDescriptor = descriptor
    }

    deinit {
        close(lockDescriptor)
    }

    /// Lets another server take the directory before this object is gone: call once nothing
    /// writes to it any more.
    public func unlock() {
        flock(lockDescriptor, LOCK_UN)
    }

    /// The rooms database's path.
    public var databasePath: String { path + "/" + RoomDatabase.fileName }

    private static func makeDirectories(_ path: String) throws(StorageError) {
        var stats = stat()
        if stat(path, &stats) == 0 {
            guard stats.st_mode & S_IFMT == S_IFDIR else {
                throw StorageError("data directory \(path) exists and is not a directory")
            }
            return
        }
        guard errno == ENOENT else { throw StorageError("cannot use data directory \(path): \(errnoText())") }
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            try makeDirectories(String(path[..<slash]))
        }
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else {
            throw StorageError("cannot create data directory \(path): \(errnoText())")
        }
    }

    private static func errnoText() -> String {
        let code = errno
        return "\(String(cString: strerror(code))) (errno \(code))"
    }
}
