import ChatServer
import Logging
import RoomLog
import SocketCore
import Testing

/// `StorageHealth` on its own: a failing part is logged once when it starts failing, not once
/// per failure, counted every time, and said to work again once.
@Suite struct StorageHealthUnitTests {
    /// Collects log lines (message and metadata) for assertions.
    final class Lines: @unchecked Sendable {
        private let lock = Locked<[(String, Logger.Metadata)]>([])
        func append(_ line: (String, Logger.Metadata)) { lock.withLock { $0.append(line) } }
        var all: [(String, Logger.Metadata)] { lock.withLock { $0 } }
    }

    struct Capture: LogHandler {
        let lines: Lines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        var metadataProvider: Logger.MetadataProvider?
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { lines.append(("\(event.message)", event.metadata ?? [:])) }
    }

    @Test func aHundredFailuresAreOneLineAndACountAndTheRecoveryOneMore() {
        let lines = Lines()
        let health = StorageHealth(logger: Logger(label: "test") { _ in Capture(lines: lines) }, logInterval: .seconds(3600))
        #expect(!health.isFailing)
        for number in 0..<100 { health.failed(.database, "disk I/O error \(number)") }
        #expect(health.isFailing)
        #expect(lines.all.count == 1, "one line for 100 failures in an interval: \(lines.all.map(\.0))")
        #expect(lines.all.first?.0 == "storage write failed")
        let database = health.reports.first { $0.part == .database }
        #expect(database?.failures == 100 && database?.failing == "disk I/O error 99", "\(String(describing: database))")
        #expect(health.reports.filter { $0.part != .database }.allSatisfy { $0.failures == 0 && $0.failing == nil })
        health.succeeded(.database)
        health.succeeded(.database)
        #expect(!health.isFailing)
        #expect(lines.all.map(\.0) == ["storage write failed", "storage works again"], "\(lines.all.map(\.0))")
        #expect(lines.all.last?.1["storage.failures"] == "100")
    }

    @Test func aLaterIntervalSaysHowManyFailuresItLeftOut() {
        let lines = Lines()
        // An interval of zero: every failure after the first is past it, and says what it left
        // out since the line before (none).
        let health = StorageHealth(logger: Logger(label: "test") { _ in Capture(lines: lines) }, logInterval: .zero)
        health.failed(.journal, "full")
        health.failed(.journal, "full")
        #expect(lines.all.count == 2)
        #expect(lines.all.last?.1["storage.failures.unlogged"] == "0")
    }
}
