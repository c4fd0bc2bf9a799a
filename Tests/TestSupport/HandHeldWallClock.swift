import Foundation
import Glibc

/// A wall clock a test moves by hand, for a `redis-server` started with it
/// (`RedisServerProcess(…, wallClock:)`): Redis's `TIME`, and so the stamps and windows of the
/// cluster's scripts and its key expiries, read this clock instead of the real one, as a chat
/// core's tests read a hand-held `ServerTime`. Redis's event loop keeps the kernel's monotonic
/// clock, so its timers run as usual.
///
/// It is a file holding the milliseconds since the Unix epoch, read on every clock call by
/// WallClock/wall-clock.c, which Redis preloads.
public final class HandHeldWallClock: @unchecked Sendable {
    /// The file Redis reads the time from.
    public let path: String
    private let directory: TemporaryDirectory
    // Set from the test's thread only, between the turns it drives.
    private var current: UInt64

    /// A clock that reads `millis` until it is moved.
    public init(millis: UInt64) throws {
        directory = try TemporaryDirectory(prefix: "wall-clock")
        path = directory.path + "/now"
        current = millis
        try write(millis)
    }

    /// The time Redis reads now, in milliseconds since the Unix epoch.
    public var millis: UInt64 { current }

    /// Moves the clock to `millis` (forward or back).
    public func set(_ millis: UInt64) {
        guard millis != current else { return }
        current = millis
        // Written in place with one pwrite of fixed width: a reader never sees a shorter number.
        try? write(millis)
    }

    /// Removes the clock's file; a Redis still reading it gets the real time again.
    public func remove() { directory.remove() }

    /// What `redis-server`'s environment needs to read this clock.
    var environment: [String: String] {
        get async throws { ["LD_PRELOAD": try await WallClockLibrary.shared.path(), "CHAT_TEST_WALL_CLOCK": path] }
    }

    private func write(_ millis: UInt64) throws {
        let text = Array(String(format: "%020llu", millis).utf8)
        let file = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard file >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(file) }
        guard pwrite(file, text, text.count, 0) == text.count else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }
}

/// The library Redis preloads, compiled once per test run with the system's C compiler, next to
/// the test bundle (so a clean build compiles it again); callers wait for the one compile.
private actor WallClockLibrary {
    static let shared = WallClockLibrary()
    private var compile: Task<String, Error>?

    /// The library's path, once compiled.
    func path() async throws -> String {
        if compile == nil { compile = Task { try await Self.build() } }
        return try await compile!.value
    }

    private static func build() async throws -> String {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("WallClock/wall-clock.c").path
        let products = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path
        let library = products + "/chat-test-wall-clock.so"
        let building = library + ".\(getpid())"
        let compiler = try ChildProcess(URL(fileURLWithPath: "/usr/bin/cc"), ["-shared", "-fPIC", "-O2", "-o", building, source])
        let status = await compiler.waitForExit(timeout: .seconds(120))
        guard status == 0 else { throw CompilerFailed(status: status, output: compiler.output) }
        guard rename(building, library) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return library
    }
}

/// The C compiler did not build the wall clock's library.
struct CompilerFailed: Error, CustomStringConvertible {
    var status: Int32?
    var output: String

    var description: String { "cc failed (status \(status.map(String.init) ?? "none")) building the wall clock's library: \(output)" }
}
