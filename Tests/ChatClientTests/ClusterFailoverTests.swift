import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// chat-client given every node of a real cluster (a real `redis-server` and real `chat-server
/// --cluster` nodes): when its node is killed it moves to another and shows what it missed.
@Suite(.serialized) struct ClusterFailoverTests {
    @Test func aClientOfAKilledNodeMovesToAnotherAndMissesNothing() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let node = ["--cluster", "redis://127.0.0.1:\(redis.port)", "--cluster-node-timeout", "2", "--no-rate-limits"]
        let first = try await ChatServerProcess(arguments: node)
        defer { first.stop() }
        let second = try await ChatServerProcess(arguments: node)
        defer { second.stop() }
        for server in [first, second] {
            #expect(await server.child.waitFor(timeout: .seconds(60)) { output, _ in output.contains("cluster link up") }, "\(server.child.output)")
        }
        let bot = try pipeClient([
            "--nick", "bot", "--server", "127.0.0.1:\(first.port)", "--server", "127.0.0.1:\(second.port)",
        ])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "on the first node: \(bot.output)")
        let carol = try await Peer(nick: "carol", port: second.port, version: 2)
        defer { carol.close() }
        for index in 1...3 { try await carol.say("before \(index)") }
        #expect(await bot.waitForOutput("<carol> before 3"), "a line from the other node arrives: \(bot.output)")

        first.child.killNow()
        #expect(await bot.waitForOutput("connection to 127.0.0.1:\(first.port) lost: "), "the loss is announced: \(bot.output)")
        let missed = (1...20).map { "missed \($0)" }
        for text in missed { try await carol.say(text) }
        #expect(await bot.waitForOutput("<carol> missed 20", timeout: .seconds(60)), "the client catches up on the second node: \(bot.output)")
        // The summary counts what the catch-up brought; lines said after the rejoin arrive live,
        // and which those are depends on when the client redialled.
        #expect(await bot.waitForOutput("reconnected to 127.0.0.1:\(second.port): 1 room"), "\(bot.output)")
        try await carol.say("live after")
        #expect(await bot.waitForOutput("<carol> live after"), "and follows the room live: \(bot.output)")

        let lines = bot.lines.map(String.init)
        #expect(!lines.contains { $0.contains("started again") }, "one cluster, one epoch: not a new room\n\(bot.output)")
        #expect(lines.contains { $0.contains("#general — ") && $0.contains(" new since you left —") }, "a catch-up marker\n\(bot.output)")
        let shown = lines.filter { $0.contains("<carol> ") }.map { String($0.split(separator: ">", maxSplits: 1)[1].dropFirst()) }
        #expect(shown == ["before 1", "before 2", "before 3"] + missed + ["live after"], "every line once, in order:\n\(bot.output)")
    }
}
