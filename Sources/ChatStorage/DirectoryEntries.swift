import Glibc

/// The names in a directory, as `readdir` lists them.
public enum DirectoryEntries {
    /// The names in `path`, without `.` and `..`; nil if it cannot be opened (`errno` says why).
    ///
    /// Each name is read where `readdir` put it. Copying the entry (`entry.pointee`) copies all
    /// of `d_name`'s 256 bytes, past the end of a short entry that glibc placed last in its
    /// buffer: a crash when an unmapped page follows, as the test run once met listing
    /// /proc/self/fd.
    public static func names(in path: String) -> [String]? {
        guard let handle = opendir(path) else { return nil }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { field in
                // 256: d_name's declared size; the name ends at its NUL, within the entry.
                field.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }
}
