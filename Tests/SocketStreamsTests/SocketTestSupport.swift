import Foundation
import SocketStreams
import Testing

/// Counts this process's open descriptors that are TCP sockets on a given port.
///
/// Tests run in parallel, so the total in /proc/self/fd moves with every other test; the sockets
/// whose local or remote port is the test's own listener are the ones a leak check must count.
enum DescriptorProbe {
    /// Entries of /proc/self/fd that are TCP sockets with `port` as local or remote port.
    static func socketCount(onPort port: Int) throws -> Int {
        let ownInodes = try socketInodes()
        var count = 0
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            let text = try String(contentsOfFile: table, encoding: .utf8)
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count > 9, ownInodes.contains(String(fields[9])) else { continue }
                if Self.port(of: fields[1]) == port || Self.port(of: fields[2]) == port { count += 1 }
            }
        }
        return count
    }

    /// The socket inode numbers behind this process's descriptors.
    private static func socketInodes() throws -> Set<String> {
        var inodes = Set<String>()
        for entry in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"),
                  target.hasPrefix("socket:[") else { continue }
            inodes.insert(String(target.dropFirst("socket:[".count).dropLast()))
        }
        return inodes
    }

    /// The port of an address field such as `0100007F:1F40`.
    private static func port(of field: Substring) -> Int? {
        guard let colon = field.lastIndex(of: ":") else { return nil }
        return Int(field[field.index(after: colon)...], radix: 16)
    }
}

extension SocketConnection {
    /// Reads until `count` bytes arrived or the stream ended.
    func readExactly(count: Int) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = inbound.makeAsyncIterator()
        while bytes.count < count, let chunk = try await iterator.next() { bytes += chunk }
        return bytes
    }
}

/// Polls `condition` every 10 ms until it holds, recording an issue after `timeout`.
///
/// For effects that have no event to wait on, such as the kernel releasing a descriptor.
func waitUntil(_ what: String, timeout: Duration = .seconds(10), _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now > deadline {
            Issue.record("timed out waiting until \(what)")
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Runs `body`, recording an issue and cancelling it if it has not finished after `timeout`.
///
/// For tests of lost wake-ups: without it such a bug hangs the whole test run instead of
/// failing one test.
func withTimeout<T: Sendable>(
    _ timeout: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        if first == nil { Issue.record("timed out after \(timeout): \(what)") }
        return first
    }
}
