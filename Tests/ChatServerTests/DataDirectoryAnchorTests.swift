import ChatStorage
import Foundation
import Glibc
import Testing
import TestSupport

/// `DataDirectory` on real directories: files made through `anchoredPath` land in the locked
/// directory whatever its path names now, and `problem()` tells when the path no longer names it.
@Suite struct DataDirectoryAnchorTests {
    @Test func aFileMadeAfterTheDirectoryWasReplacedNeverLandsInTheNewOne() throws {
        let scratch = try TemporaryDirectory(prefix: "chat-anchor")
        defer { scratch.remove() }
        let path = scratch.path + "/data"
        let directory = try DataDirectory(path: path)
        #expect(directory.problem() == nil)
        #expect(directory.anchoredPath != path, "/proc/self/fd names the locked directory")
        try FileManager.default.removeItem(atPath: path)
        #expect(mkdir(path, 0o700) == 0, "another directory at the same path")
        let descriptor = open(directory.anchoredPath + "/journal-1.log", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        #expect(descriptor < 0 && errno == ENOENT, "a deleted directory takes no new file")
        if descriptor >= 0 { close(descriptor) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: path).isEmpty, "the new directory got nothing")
        #expect(directory.problem()?.contains("deleted") == true, "\(String(describing: directory.problem()))")
        // The new directory is free for another server: the lock went with the old one.
        let next = try DataDirectory(path: path)
        #expect(next.problem() == nil)
    }

    @Test func aRenamedDirectoryKeepsGettingItsFilesAndIsReportedGone() throws {
        let scratch = try TemporaryDirectory(prefix: "chat-anchor")
        defer { scratch.remove() }
        let path = scratch.path + "/data"
        let directory = try DataDirectory(path: path)
        #expect(rename(path, scratch.path + "/moved") == 0)
        let descriptor = open(directory.anchoredPath + "/journal-1.log", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        #expect(descriptor >= 0, "the renamed directory still takes the file")
        if descriptor >= 0 { close(descriptor) }
        #expect(FileManager.default.fileExists(atPath: scratch.path + "/moved/journal-1.log"))
        #expect(directory.problem()?.contains("gone") == true, "\(String(describing: directory.problem()))")
    }

    @Test func deletingEveryFileInTheDirectoryDoesNotFreeIt() throws {
        let scratch = try TemporaryDirectory(prefix: "chat-anchor")
        defer { scratch.remove() }
        let path = scratch.path + "/data"
        let directory = try DataDirectory(path: path)
        for name in try FileManager.default.contentsOfDirectory(atPath: path) { unlink(path + "/" + name) }
        #expect(throws: StorageError.self, "a second holder is refused") { _ = try DataDirectory(path: path) }
        withExtendedLifetime(directory) {}
    }
}
