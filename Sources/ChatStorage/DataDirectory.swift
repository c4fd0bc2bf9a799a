import Glibc

/// The directory a server keeps its rooms in, held for the server's lifetime.
///
/// Opening creates the directory (mode 0700) if it is missing, checks that the server may write
/// it, opens the directory itself and takes an exclusive `flock` on that descriptor, so a second
/// server on the same directory is refused at start instead of numbering the same rooms twice.
///
/// It also refuses a directory someone else could change (`permissionProblem`): one its group
/// or anyone may write to, or one another user owns. Its files hold password hashes and room
/// keys; whoever can write the directory can replace them (or put a `-wal` file of their own
/// beside a database before it is opened), whatever the files' own modes. Root is refused
/// another user's directory too unless the caller allows it (`rootMayUseOthers`: the operator's
/// commands): a server run as root writes there for its whole life, so the owner could swap a
/// file it is about to create for a symbolic link to a system file, and the files it makes would
/// be root's, which the owner's own server could not open afterwards.
///
/// Why the directory and not a `lock` file in it: a file can be deleted under a running server
/// (an `rm -rf` of the directory took the old `lock` file with it), and a second server then
/// made a new one and started. A lock on the directory's own inode goes only with the directory;
/// a server started on a new directory at the same path locks a different inode, so
/// `problem()` tells the first one that its directory is no longer at its path, and files the
/// store creates later are made through `anchoredPath` — the locked inode itself — so they can
/// never land in the new directory.
///
/// Owns the directory's descriptor and closes it (releasing the lock) in `deinit`; the OS
/// releases it if the process dies.
public final class DataDirectory: Sendable {
    /// The directory, as given.
    public let path: String
    /// The open directory, locked; owned here.
    private let descriptor: Int32
    /// The locked directory's device and inode.
    private let device: UInt64
    private let inode: UInt64
    /// `/proc/self/fd/N`: the locked directory whatever its path now holds (see `anchoredPath`).
    private let anchor: String?

    /// Why a directory others may list is still served, said by whoever opened it (the server
    /// logs it, the commands print it); nil for a directory of mode 0700.
    public let warning: String?

    /// The end of the message for a directory another server holds.
    public static let heldByAnotherServer = "another chat-server is using it"

    /// Opens `path`, creating it and its missing parents if `creating` (else a missing `path` is
    /// refused: `… is not a directory`), and locks it. Throws a `StorageError` that names the
    /// directory and the reason (another server holds it, not writable, others could change it, …).
    /// `rootMayUseOthers`: run as root, the process may open a directory another user owns — for
    /// the operator's short commands on a service's directory (`backup`, `check`, `account`),
    /// never for a server.
    public init(path: String, creating: Bool = true, rootMayUseOthers: Bool = false) throws(StorageError) {
        self.path = path
        if creating {
            try Self.makeDirectories(path)
        } else {
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { throw StorageError("\(path) is not a directory") }
        }
        guard access(path, W_OK | X_OK) == 0 else {
            throw StorageError("data directory \(path) is not writable: \(Self.errnoText())")
        }
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw StorageError("cannot open data directory \(path): \(Self.errnoText())")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let problem = Self.errnoText()
            close(descriptor)
            throw StorageError("cannot use data directory \(path): \(problem)")
        }
        // Of the directory opened, not of whatever `path` names by now.
        if let problem = Self.permissionProblem(info, path: path, rootMayUseOthers: rootMayUseOthers) {
            close(descriptor)
            throw StorageError(problem)
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let problem = errno == EWOULDBLOCK ? Self.heldByAnotherServer : Self.errnoText()
            close(descriptor)
            throw StorageError("data directory \(path) is locked: \(problem)")
        }
        self.descriptor = descriptor
        warning = Self.permissionWarning(info, path: path)
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        // Linux's /proc/self/fd/N names the open directory itself: opening or creating a file
        // under it resolves through the descriptor, never through `path` again. Without /proc
        // (or if it names something else) files fall back to `path`, and `problem()` is what
        // notices a replaced directory.
        let anchor = "/proc/self/fd/\(descriptor)"
        var anchored = stat()
        self.anchor = stat(anchor, &anchored) == 0 && UInt64(anchored.st_ino) == inode && UInt64(anchored.st_dev) == device
            ? anchor : nil
    }

    deinit {
        close(descriptor)
    }

    /// Lets another server take the directory before this object is gone: call once nothing
    /// writes to it any more.
    public func unlock() {
        flock(descriptor, LOCK_UN)
    }

    /// A path to the locked directory that goes through its descriptor (`/proc/self/fd/N`), for
    /// files made after start: deleted, the directory takes no new file (`ENOENT`); renamed, it
    /// still gets them; and a new directory at `path` never does. `path` where `/proc` is missing.
    public var anchoredPath: String { anchor ?? path }

    /// Why the directory at `path` is no longer the one this server locked, or nil while it is:
    /// it was deleted (no links left), or `path` now names another directory, or nothing.
    public func problem() -> String? {
        var held = stat()
        if fstat(descriptor, &held) == 0, held.st_nlink == 0 {
            return "data directory \(path) was deleted while the server ran"
        }
        var current = stat()
        guard stat(path, &current) == 0 else {
            return "data directory \(path) is gone (\(Self.errnoText())) while the server ran"
        }
        guard UInt64(current.st_dev) == device, UInt64(current.st_ino) == inode else {
            return "data directory \(path) was replaced by another directory while the server ran"
        }
        return nil
    }

    /// The rooms database's path.
    public var databasePath: String { path + "/" + RoomDatabase.fileName }

    /// Refuses a data directory at `path` that someone else could change; see the type's comment.
    /// For a directory that is read, not opened as one (`backup`'s source, which root may read
    /// whoever owns it: `sudo chat-server backup` of a service's directory).
    public static func checkPermissions(of path: String) throws(StorageError) {
        var info = stat()
        guard stat(path, &info) == 0 else { throw StorageError("cannot use data directory \(path): \(errnoText())") }
        if let problem = permissionProblem(info, path: path, rootMayUseOthers: true) { throw StorageError(problem) }
    }

    /// Why the directory `info` describes must not be used, or nil: its group or anyone may write
    /// to it (the sticky bit does not help: others could still add files), or a user other than
    /// this process's owns it (who could change its mode at will) — unless this process is root
    /// and `rootMayUseOthers`.
    private static func permissionProblem(_ info: stat, path: String, rootMayUseOthers: Bool) -> String? {
        // 0o022: write permission for the group or others.
        if info.st_mode & 0o022 != 0 {
            return "data directory \(path) is writable by others (mode \(octal(info.st_mode))): they could replace its files; run chmod 700 \(path)"
        }
        let user = geteuid()
        if info.st_uid != user, user != 0 || !rootMayUseOthers {
            let owner = userName(info.st_uid).map { "uid \(info.st_uid), \($0)" } ?? "uid \(info.st_uid)"
            return "data directory \(path) belongs to another user (\(owner)), who could change it: run as that user, or give it to uid \(user) (sudo chown -R \(user) \(path))"
        }
        return nil
    }

    /// The name of the user `uid` in the password database, or nil if it has none.
    private static func userName(_ uid: uid_t) -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        return buffer.withUnsafeMutableBufferPointer { storage in
            guard let base = storage.baseAddress, getpwuid_r(uid, &entry, base, storage.count, &found) == 0, found != nil, let name = entry.pw_name
            else { return nil }
            return String(cString: name)
        }
    }

    /// What to say of the directory `info` describes if others may list it, or nil. Served
    /// anyway, as before these checks: what chat-server makes there now is 0600 (its umask), so
    /// others see names and sizes only — but an older chat-server made its databases 0644,
    /// which such a directory leaves readable; the warning says so at every start.
    private static func permissionWarning(_ info: stat, path: String) -> String? {
        // 0o077: any permission for the group or others.
        guard info.st_mode & 0o077 != 0 else { return nil }
        return "data directory \(path) can be listed by others (mode \(octal(info.st_mode))): run chmod 700 \(path) so that they cannot read its files either (0600 now; an older chat-server made them 0644)"
    }

    /// The permission bits of `mode` as `chmod` takes them: four octal digits.
    private static func octal(_ mode: mode_t) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

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
