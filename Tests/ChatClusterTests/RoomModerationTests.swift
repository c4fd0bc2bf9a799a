import ChatCluster
import ChatCore
import Foundation
import RedisClient
import RedisProtocol
import Testing
import TestSupport

// The room log's moderation in a real Redis (ModerationCheck.swift): every check and change runs
// inside the append script, so these drive it the way a node does — `append` with a change and a
// moderation — and read back what Redis keeps.

/// What a node passes for a join: the joiner's account, the key it gave, its nick key and its
/// address; the node's room log decides the join by the room's rules (ClusterAdmission).
private func admit(_ nick: String, account: String = "", key: String = "", address: String = "127.0.0.1") -> ModerationCheck {
    .admit(account: account, key: key, inviteKey: nick.lowercased(), address: address)
}

private func mode(
    _ mode: UInt8, _ on: Bool, _ argument: String = "", by: String, account: String = "", admin: Bool = false, reason: String = ""
) -> ModerationCheck {
    .setMode(by: by, account: account, admin: admin, mode: mode, on: on, argument: argument, reason: reason)
}

/// The refusal of `result`, if the script refused it.
private func refusal(_ result: Result<AppendedEvent, ClusterError>) -> ModerationRefusal? {
    if case .failure(let error) = result { return ModerationRefusal.parse(error)?.refusal }
    return nil
}

extension Node {
    func join(_ nick: String, _ room: String, node: String, _ moderation: ModerationCheck) async -> Result<AppendedEvent, ClusterError> {
        await append(payload("join \(nick)"), change: .join(nick: nick, node: node), moderation: moderation, to: room)
    }

    func dropAccount(_ key: String) async throws {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [commands] in ClusterAccounts(commands: commands).drop(key: key) { continuation.resume(with: $0) } }
        }
    }

    func moderation(of room: String) async throws -> ClusterRoomModeration {
        try await directory { $0.moderation(of: room, completion: $1) }
    }
}

/// One test at a time: each starts its own redis-server.
@Suite("A room's moderation in the cluster's Redis", .serialized)
struct RoomModerationTests {
    @Test func theCreatorIsOpAndOnlyOpsChangeModesOrSpeakInAModeratedRoom() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        _ = try await a.join("bob", "r", node: "a", admit("bob")).get()
        #expect(try await a.moderation(of: "r").roles == ["alice": "o"], "the creator alone is op")

        let bobModerates = await a.append(payload("mode"), change: .none, moderation: mode(2, true, by: "bob"), to: "r")
        #expect(refusal(bobModerates) == .notOperator)
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(2, true, by: "alice"), to: "r").get()
        #expect(refusal(await a.append(payload("hi"), change: .none, moderation: .speak(nick: "bob"), to: "r")) == .moderated)
        _ = try await a.append(payload("hi"), change: .none, moderation: .speak(nick: "alice"), to: "r").get()
        _ = try await a.append(payload("voice"), change: .none, moderation: mode(6, true, "bob", by: "alice"), to: "r").get()
        _ = try await a.append(payload("hi"), change: .none, moderation: .speak(nick: "bob"), to: "r").get()
        _ = try await a.append(payload("op"), change: .none, moderation: mode(5, true, "bob", by: "alice"), to: "r").get()
        var state = try await a.moderation(of: "r")
        #expect(state.moderated && state.roles == ["alice": "o", "bob": "ov"])

        // Roles move with a nick change and go with the member.
        _ = try await a.append(payload("nick"), change: .rename(old: "bob", new: "robert", node: "a"), to: "r").get()
        #expect(try await a.moderation(of: "r").roles == ["alice": "o", "robert": "ov"])
        _ = try await a.append(payload("left"), change: .leave(nick: "robert", node: "a"), to: "r").get()
        state = try await a.moderation(of: "r")
        #expect(state.roles == ["alice": "o"])
        #expect(refusal(await a.append(payload("t"), change: .topic, moderation: .setTopic(by: "alice", admin: false), to: "r")) == nil)
    }

    @Test func bansKeysLimitsAndInviteOnlyRefuseJoinsAndAnInvitationPassesOnce() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        for change in [mode(7, true, "address:10.0.0.0/8", by: "alice", reason: "spam"), mode(1, true, "s3cret", by: "alice"), mode(4, true, "2", by: "alice")] {
            _ = try await a.append(payload("mode"), change: .none, moderation: change, to: "r").get()
        }
        #expect(refusal(await a.join("eve", "r", node: "a", admit("eve", key: "s3cret", address: "10.9.8.7"))) == .banned)
        #expect(refusal(await a.join("carol", "r", node: "a", admit("carol"))) == .badKey)
        #expect(refusal(await a.join("carol", "r", node: "a", admit("carol", key: "guess"))) == .badKey)
        _ = try await a.join("carol", "r", node: "a", admit("carol", key: "s3cret")).get()
        #expect(refusal(await a.join("dave", "r", node: "a", admit("dave", key: "s3cret"))) == .full)

        // An invitation passes the key and the limit, once; not a ban.
        try await a.directory { $0.invite("dave", nickKey: "dave", into: "r", by: "alice", admin: false, lifetimeMillis: 60_000, completion: $1) }
        _ = try await a.join("dave", "r", node: "a", admit("dave")).get()
        _ = try await a.append(payload("left"), change: .leave(nick: "dave", node: "a"), to: "r").get()
        #expect(refusal(await a.join("dave", "r", node: "a", admit("dave"))) == .badKey, "the invitation was used")
        try await a.directory { $0.invite("eve", nickKey: "eve", into: "r", by: "alice", admin: false, lifetimeMillis: 60_000, completion: $1) }
        #expect(refusal(await a.join("eve", "r", node: "a", admit("eve", address: "10.9.8.7"))) == .banned, "bans hold for the invited")

        // Only an op invites; invite-only refuses the uninvited.
        do {
            try await a.directory { $0.invite("frank", nickKey: "frank", into: "r", by: "carol", admin: false, lifetimeMillis: 60_000, completion: $1) }
            Issue.record("carol, no op, invited frank")
        } catch let error as ClusterError {
            #expect(ModerationRefusal.parse(error)?.refusal == .notOperator)
        }
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(4, false, by: "alice"), to: "r").get()
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(0, true, by: "alice"), to: "r").get()
        #expect(refusal(await a.join("frank", "r", node: "a", admit("frank", key: "s3cret"))) == .inviteOnly)
        // A server operator joins whatever the room's bans and modes.
        let root = ModerationCheck.admit(account: "root", key: "", inviteKey: "root", address: "10.1.2.3", admin: true)
        _ = try await a.join("root", "r", node: "a", root).get()

        let bans = try await a.directory { $0.bans(of: "r", completion: $1) }
        #expect(bans.map(\.mask) == ["address:10.0.0.0/8"] && bans.first?.setBy == "alice" && bans.first?.reason == "spam")
    }

    /// A node decides a join against the room's state as it last read it (ClusterAdmission):
    /// what another node changed since — a mode, the member count — makes the script answer
    /// with the state as it is, and the join is decided again, a refusal as much as an admission.
    @Test func aJoinDecidedOnAStaleStateIsDecidedAgainOnTheRoomAsItIs() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        _ = try await a.follow("r")
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        _ = try await a.join("bob", "r", node: "a", admit("bob")).get()
        // Node a keeps the state it read; node b makes the room invite-only, then lifts it.
        _ = try await b.append(payload("mode"), change: .none, moderation: mode(0, true, by: "alice"), to: "r").get()
        #expect(refusal(await a.join("carol", "r", node: "a", admit("carol"))) == .inviteOnly, "decided on +i, not on the state a read")
        _ = try await b.append(payload("mode"), change: .none, moderation: mode(0, false, by: "alice"), to: "r").get()
        // a read +i with carol's refusal: a refusal is decided again too.
        _ = try await a.join("carol", "r", node: "a", admit("carol")).get()

        // A limit of 4 with 3 members as a read it; b's join fills the room.
        _ = try await b.append(payload("mode"), change: .none, moderation: mode(4, true, "4", by: "alice"), to: "r").get()
        _ = try await a.join("dave", "r", node: "a", admit("dave")).get()
        _ = try await a.append(payload("left"), change: .leave(nick: "dave", node: "a"), to: "r").get()
        _ = try await b.join("erin", "r", node: "b", admit("erin")).get()
        #expect(refusal(await a.join("dave", "r", node: "a", admit("dave"))) == .full, "the member count at the append counts")

        // The room empties behind a's back: whoever comes in first creates it anew, and is its op.
        for nick in ["alice", "bob", "carol"] {
            _ = try await a.append(payload("left"), change: .leave(nick: nick, node: "a"), to: "r").get()
        }
        _ = try await b.append(payload("left"), change: .leave(nick: "erin", node: "b"), to: "r").get()
        _ = try await a.join("frank", "r", node: "a", admit("frank")).get()
        #expect(try await a.moderation(of: "r").roles == ["frank": "o"], "the first in an emptied room is its op")
    }

    @Test func aRegisteredRoomKeepsItsFounderAndRolesEmptyAndNobodyTakesItOver() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        _ = try await a.join("alice", "r", node: "a", admit("alice", account: "alice")).get()
        _ = try await b.join("bob", "r", node: "b", admit("bob", account: "bob")).get()
        let guestRegisters = await b.append(payload("mode"), change: .none, moderation: mode(8, true, by: "bob", account: "bob"), to: "r")
        #expect(refusal(guestRegisters) == .notOperator, "bob is no op")
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(8, true, by: "alice", account: "alice"), to: "r").get()
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(5, true, "bob", by: "alice", account: "alice"), to: "r").get()
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(2, true, by: "alice", account: "alice"), to: "r").get()
        _ = try await a.append(payload("left"), change: .leave(nick: "alice", node: "a"), to: "r").get()
        _ = try await b.append(payload("left"), change: .leave(nick: "bob", node: "b"), to: "r").get()
        var state = try await a.moderation(of: "r")
        #expect(state.founder == "alice" && state.moderated && state.roles.isEmpty, "an empty registered room keeps its modes")

        // First in, a guest is no op of a registered room; the founder and bob's account are.
        _ = try await b.join("mallory", "r", node: "b", admit("mallory")).get()
        #expect(refusal(await b.append(payload("mode"), change: .none, moderation: mode(2, false, by: "mallory"), to: "r")) == .notOperator)
        _ = try await b.join("bob", "r", node: "b", admit("bob", account: "bob")).get()
        _ = try await a.join("alice", "r", node: "a", admit("alice", account: "alice")).get()
        state = try await a.moderation(of: "r")
        #expect(state.roles == ["bob": "o", "alice": "o"])
        #expect(refusal(await b.append(payload("kick"), change: .kick(nick: "alice"), moderation: .kick(by: "bob", account: "bob", admin: false), to: "r")) == .notOperator, "an op does not kick the founder")
        #expect(refusal(await b.append(payload("deop"), change: .none, moderation: mode(5, false, "alice", by: "bob", account: "bob"), to: "r")) == .notOperator)
        // The founder kicks bob, who is served by the other node.
        _ = try await a.append(payload("kick"), change: .kick(nick: "bob"), moderation: .kick(by: "alice", account: "alice", admin: false), to: "r").get()
        let members = try await a.directory { $0.members(of: "r", completion: $1) }
        #expect(members == ["mallory", "alice"])
        // Unregistered and emptied, the room forgets its moderation.
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(8, false, by: "alice", account: "alice"), to: "r").get()
        _ = try await a.append(payload("left"), change: .leave(nick: "alice", node: "a"), to: "r").get()
        _ = try await b.append(payload("left"), change: .leave(nick: "mallory", node: "b"), to: "r").get()
        #expect(try await a.moderation(of: "r") == ClusterRoomModeration())
    }

    @Test func aKickFindsTheMemberInAnyLetterCaseAndAKickedMembersLinesAreRefused() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        _ = try await b.join("Bob", "r", node: "b", admit("Bob")).get()
        _ = try await a.append(payload("op"), change: .none, moderation: mode(5, true, "BOB", by: "alice"), to: "r").get()
        #expect(try await a.moderation(of: "r").roles == ["alice": "o", "Bob": "o"], "op given as BOB lands on Bob")
        let spared = await a.append(payload("k"), change: .kick(nick: "bob"), moderation: .kick(by: "alice", account: "", admin: true, sparingOps: true), to: "r")
        #expect(refusal(spared) == .isOperator, "a ban's kick spares ops")
        _ = try await a.append(payload("deop"), change: .none, moderation: mode(5, false, "bob", by: "alice"), to: "r").get()
        _ = try await a.append(payload("kick"), change: .kick(nick: "bob"), moderation: .kick(by: "alice", account: "", admin: false), to: "r").get()
        #expect(try await a.directory { $0.members(of: "r", completion: $1) } == ["alice"])
        #expect(try await a.moderation(of: "r").roles == ["alice": "o"])
        // A line Bob sent before his node heard of the kick: refused, not logged.
        #expect(refusal(await b.append(payload("late"), change: .none, moderation: .speak(nick: "Bob"), to: "r")) == .notMember)
        #expect(refusal(await b.append(payload("t"), change: .topic, moderation: .setTopic(by: "Bob", admin: false), to: "r")) == .notMember)
        #expect(refusal(await a.append(payload("kick"), change: .kick(nick: "bob"), moderation: .kick(by: "alice", account: "", admin: false), to: "r")) == .notMember)
    }

    @Test func aDroppedAccountLeavesNoRoomsNorRolesAndRegistrationsAreBounded() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        for index in 0..<ModerationLimits.maxRegisteredRoomsPerAccount {
            _ = try await a.join("alice", "r\(index)", node: "a", admit("alice", account: "alice")).get()
            _ = try await a.append(payload("reg"), change: .none, moderation: mode(8, true, by: "alice", account: "alice"), to: "r\(index)").get()
        }
        _ = try await a.join("alice", "one-more", node: "a", admit("alice", account: "alice")).get()
        let past = await a.append(payload("reg"), change: .none, moderation: mode(8, true, by: "alice", account: "alice"), to: "one-more")
        #expect(refusal(past) == .listFull, "ten registered rooms an account")
        // Bob is given op in alice's room by his account, then both accounts are dropped.
        _ = try await a.join("bob", "r0", node: "a", admit("bob", account: "bob")).get()
        _ = try await a.append(payload("op"), change: .none, moderation: mode(5, true, "bob", by: "alice", account: "alice"), to: "r0").get()
        #expect(try await a.command([Array("HGET".utf8), Array("chat:{r0}:accountroles".utf8), Array("bob".utf8)]).get() == .bulk("o"))
        try await a.dropAccount("alice")
        try await a.dropAccount("bob")
        for index in 0..<ModerationLimits.maxRegisteredRoomsPerAccount {
            #expect(try await a.moderation(of: "r\(index)").founder == "", "#r\(index) is no longer registered")
        }
        #expect(try await a.command([Array("HGET".utf8), Array("chat:{r0}:accountroles".utf8), Array("bob".utf8)]).get() == .bulkString(nil))
        #expect(try await a.command([Array("SCARD".utf8), Array("chat:registered".utf8)]).get() == .integer(0))
        // Whoever registers the nick again founds nothing: a guest logged in as the new alice is no op.
        _ = try await a.join("mallory", "r1", node: "a", admit("mallory", account: "alice")).get()
        #expect(try await a.moderation(of: "r1").roles["mallory"] == nil)
    }

    @Test func twoNodesBanningAndUnbanningAtOnceEndInOneState() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        _ = try await a.append(payload("op"), change: .none, moderation: mode(5, true, "alice", by: "alice"), to: "r").get()
        _ = try await b.join("bob", "r", node: "b", admit("bob")).get()
        _ = try await a.append(payload("op"), change: .none, moderation: mode(5, true, "bob", by: "alice"), to: "r").get()
        #expect(try await a.follow("r") > 0)
        #expect(try await b.follow("r") > 0)
        async let fromA: Void = Self.flip(a, by: "alice", times: 200)
        async let fromB: Void = Self.flip(b, by: "bob", times: 200)
        _ = try await (fromA, fromB)
        let seenA = await a.waitForEvents(400, in: "r")
        let seenB = await b.waitForEvents(400, in: "r")
        #expect(seenA == seenB && seenA.count == 400, "both nodes deliver the same changes in the same order")
        let last = String(decoding: seenA.last!.payload, as: UTF8.self)
        let banned = try await a.directory { $0.bans(of: "r", completion: $1) }.map(\.mask)
        #expect(banned == (last.hasPrefix("+") ? ["nick:carol"] : []), "Redis holds what the last change in the log says (\(last))")
    }

    /// A join answered `STALE` as often as the node decides (`maxAdmissionAttempts`) is answered
    /// `CONTENDED`, to try again, and appends nothing; given one more decision, it gets in.
    @Test func aJoinStaleUnderEveryDecisionIsAnsweredContendedAndAppendsNothing() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        // A node that has read nothing decides on a version that never holds: one decision is stale.
        let a = try await Node("a", port: redis.port, maxAdmissionAttempts: 1)
        #expect(refusal(await a.join("alice", "r", node: "a", admit("alice"))) == .contended)
        #expect(try await a.directory { $0.members(of: "r", completion: $1) }.isEmpty, "nothing appended")
        let b = try await Node("b", port: redis.port, maxAdmissionAttempts: 2)
        _ = try await b.join("alice", "r", node: "b", admit("alice")).get()
        #expect(try await b.directory { $0.members(of: "r", completion: $1) } == ["alice"])
    }

    /// Joins pipelined from two nodes at once into a room with a member limit: each node decides
    /// on the member count it last read, which the others' joins move under it; the script's
    /// count range keeps the room at its limit — every join over it is refused `FULL`, none is
    /// let in past it, and none gives up (`CONTENDED`).
    @Test func joinsRacingFromTwoNodesStopAtTheMemberLimit() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        for node in [a, b] { _ = try await node.follow("r") }
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        _ = try await a.append(payload("mode"), change: .none, moderation: mode(4, true, "60", by: "alice"), to: "r").get()
        // Each node reads the room's state with its first join, then decides the rest on it.
        _ = try await a.join("a0", "r", node: "a", admit("a0")).get()
        _ = try await b.join("b0", "r", node: "b", admit("b0")).get()
        let outcomes = try await withThrowingTaskGroup(of: Result<AppendedEvent, ClusterError>.self) { group in
            for index in 1...50 {
                group.addTask { await a.join("a\(index)", "r", node: "a", admit("a\(index)")) }
                group.addTask { await b.join("b\(index)", "r", node: "b", admit("b\(index)")) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let admitted = outcomes.filter { if case .success = $0 { true } else { false } }.count
        let refusals = outcomes.compactMap(refusal)
        #expect(admitted == 57, "alice, a0 and b0, then 57 more make the limit of 60")
        #expect(refusals.count == 43 && refusals.allSatisfy { $0 == .full }, "every other join is refused FULL: \(Set(refusals))")
        let members = try await a.directory { $0.members(of: "r", completion: $1) }
        #expect(members.count == 60)
    }

    /// Bans and unbans `nick:carol` in turn, `times` times, without waiting between them.
    private static func flip(_ node: Node, by: String, times: Int) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<times {
                let on = index.isMultiple(of: 2)
                group.addTask {
                    _ = try await node.append(
                        Array("\(on ? "+" : "-")\(by)\(index)".utf8), change: .none,
                        moderation: mode(7, on, "nick:carol", by: by), to: "r"
                    ).get()
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func listsAreBoundedBansRefusedPastTheCapAndInvitationsTrimmed() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        _ = try await a.join("alice", "r", node: "a", admit("alice")).get()
        for index in 0..<ModerationLimits.maxRoomBans {
            _ = try await a.append(payload("ban"), change: .none, moderation: mode(7, true, "nick:n\(index)", by: "alice"), to: "r").get()
        }
        #expect(refusal(await a.append(payload("ban"), change: .none, moderation: mode(7, true, "nick:extra", by: "alice"), to: "r")) == .listFull)
        _ = try await a.append(payload("ban"), change: .none, moderation: mode(7, true, "nick:n0", by: "alice", reason: "again"), to: "r").get()
        #expect(try await a.directory { $0.bans(of: "r", completion: $1) }.count == ModerationLimits.maxRoomBans)
        for index in 0..<(ModerationLimits.maxInvitations + 50) {
            try await a.directory { $0.invite("i\(index)", nickKey: "i\(index)", into: "r", by: "alice", admin: false, lifetimeMillis: 60_000, completion: $1) }
        }
        let kept = try await a.command([Array("HLEN".utf8), Array("chat:{r}:invites".utf8)]).get()
        #expect(kept == .integer(Int64(ModerationLimits.maxInvitations)))
        #expect(refusal(await a.append(payload("m"), change: .none, moderation: mode(99, true, by: "alice"), to: "r")) == .badMode)
    }
}

@Suite("The cluster's server bans in Redis", .serialized)
struct ClusterServerBansTests {
    @Test func aBanIsPublishedToListeningNodesBoundedAndLiftedOnce() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        let heard = Heard()
        try await b.listen(to: ClusterServerBans.channel, heard)
        try await a.serverBans { $0.set("address:10.0.0.0/8", on: true, setBy: "root", reason: "flood", completion: $1) }
        try await a.serverBans { $0.set("account:mallory", on: true, setBy: "", reason: "", completion: $1) }
        try await a.serverBans { $0.set("account:mallory", on: false, setBy: "root", reason: "", completion: $1) }
        try await a.serverBans { $0.set("account:mallory", on: false, setBy: "root", reason: "", completion: $1) }
        _ = await eventually(every: .milliseconds(10)) { heard.changes.compactMap(ClusterServerBans.parseChange).count >= 3 }
        #expect(heard.changes.compactMap(ClusterServerBans.parseChange).map { "\($0.banned ? "+" : "-")\($0.mask)" }
            == ["+address:10.0.0.0/8", "+account:mallory", "-account:mallory"], "a lift of what is not banned publishes nothing")
        let bans = try await b.serverBans { $0.all(completion: $1) }
        #expect(bans.map(\.mask) == ["address:10.0.0.0/8"] && bans[0].setBy == "root" && bans[0].reason == "flood")

        for index in 1..<ModerationLimits.maxServerBans {
            try await a.serverBans { $0.set("nick:n\(index)", on: true, setBy: "root", reason: "", completion: $1) }
        }
        do {
            try await a.serverBans { $0.set("nick:extra", on: true, setBy: "root", reason: "", completion: $1) }
            Issue.record("a ban past the cap was kept")
        } catch let error as ClusterError {
            #expect(ModerationRefusal.parse(error)?.refusal == .listFull)
        }
        #expect(try await a.serverBans { $0.all(completion: $1) }.count == ModerationLimits.maxServerBans)
    }
}

/// Publications a test listened to, from the node's queue.
private final class Heard: @unchecked Sendable {
    private let lock = NSLock()
    private var bodies: [[UInt8]] = []
    func append(_ body: [UInt8]) { lock.withLock { bodies.append(body) } }
    var changes: [[UInt8]] { lock.withLock { bodies } }
    var count: Int { lock.withLock { bodies.count } }
}

extension Node {
    func serverBans<T: Sendable>(
        _ body: @escaping @Sendable (ClusterServerBans, @escaping (Result<T, ClusterError>) -> Void) -> Void
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [commands] in body(ClusterServerBans(commands: commands)) { continuation.resume(with: $0) } }
        }
    }

    /// Listens to `channel` and returns once the subscription hears: a probe (which no parser
    /// takes for a change) is published until it arrives.
    fileprivate func listen(to channel: [UInt8], _ heard: Heard) async throws {
        queue.sync { log.listen(to: channel) { heard.append($0) } }
        let subscribed = await eventually(every: .milliseconds(20)) {
            _ = await command([Array("PUBLISH".utf8), channel, Array("probe".utf8)])
            return heard.count > 0
        }
        #expect(subscribed, "the subscription never heard a probe")
    }
}
