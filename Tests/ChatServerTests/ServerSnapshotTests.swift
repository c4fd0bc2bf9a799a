import ChatProtocol
@testable import ChatCore
@testable import ChatServer
import Testing

/// `ChatServer.snapshot` in process, with no `MetricsSystem` bootstrapped (swift-metrics' no-op
/// handlers): what the status page and the gauges are made of, and that recording needs no backend.
@Suite struct ServerSnapshotTests {
    /// Takes a snapshot and returns it.
    private func snapshot(of server: ChatServer) async -> ServerSnapshot {
        await withCheckedContinuation { continuation in server.snapshot { continuation.resume(returning: $0) } }
    }

    @Test func aSnapshotCountsConnectionsRoomsAndTheBusiestAndLiveliestRooms() async throws {
        try await withServer { server in
            server.startRecordingMetrics()
            let first = await snapshot(of: server)
            #expect(first.mode == .memory && first.rooms == 0 && first.connections.chatting == 0, "an empty server: \(first)")
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "bob")
            _ = try await alice.join("lobby")
            _ = try await bob.join("lobby")
            _ = try await alice.join("quiet")
            // Traffic is events since the previous snapshot: a room first seen has none yet.
            #expect(await snapshot(of: server).liveliestRooms.isEmpty, "no traffic before the first snapshot of the rooms")
            for index in 0..<20 { try await alice.send(.say(room: "lobby", text: "line \(index)")) }
            _ = try await bob.collect(20, "alice's lines") { frame -> Bool? in
                if case .message("lobby", _, _, "alice", _) = frame { return true }
                return nil
            }
            let second = await snapshot(of: server)
            #expect(second.connections.chatting == 2, "two welcomed clients: \(second.connections)")
            #expect(second.connectionsAccepted == 2)
            #expect(second.rooms == 2 && second.memberships == 3, "two rooms, three memberships: \(second)")
            #expect(second.busiestRooms.map(\.name) == ["lobby", "quiet"], "rooms by members: \(second.busiestRooms)")
            #expect(second.liveliestRooms.first?.name == "lobby", "lobby had the traffic: \(second.liveliestRooms)")
            #expect(second.budget.used.contains { $0.0 == "history" && $0.1 > 0 }, "the lines are in history: \(second.budget.used)")
            let page = StatusPage.render(second, process: ProcessStatistics.current(), files: nil)
            #expect(page.contains("most members lobby 2, quiet 1"), "the status page lists the rooms:\n\(page)")
            #expect(page.contains("none (--no-persistence)"), "and says where rooms live:\n\(page)")
            alice.close()
            bob.close()
        }
    }

    @Test func theProcessStatisticsComeFromProc() throws {
        let statistics = try #require(ProcessStatistics.current(), "/proc/self is readable")
        #expect(statistics.residentBytes > 1 << 20, "a test process holds more than a MiB: \(statistics)")
        #expect(statistics.openDescriptors >= 3 && statistics.openDescriptors <= statistics.maxDescriptors)
        #expect(statistics.cpuSeconds > 0 && statistics.startTimeSeconds > 1_600_000_000, "\(statistics)")
    }

    @Test func durationsAndSizesReadAsPeopleWriteThem() {
        #expect(StatusPage.duration(59) == "59s")
        #expect(StatusPage.duration(3_725) == "1h 02m 05s")
        #expect(StatusPage.duration(90_061) == "1d 1h 01m 01s")
        #expect(StatusPage.bytes(512) == "512 B")
        #expect(StatusPage.bytes(3 << 20 + 512 << 10) == "3.5 MiB")
    }
}
