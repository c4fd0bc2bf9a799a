@testable import ChatCore
import ChatProtocol
import Testing

/// A cluster node's decisions on joins (ClusterAdmission): the rules of every mode
/// (`RoomRules`), and the member counts each decision holds for, which the append script checks.
@Suite struct ClusterAdmissionTests {
    private func decide(
        _ nick: String, account: String = "", key: String = "", address: String = "10.0.0.1", admin: Bool = false,
        _ state: ClusterAdmissionState
    ) -> ClusterAdmission {
        ClusterAdmission.decide(
            .admit(account: account, key: key, inviteKey: nick, address: address, admin: admin), nick: nick, room: "r", state: state)
    }

    @Test func theFirstInAnUnregisteredRoomIsItsOpWhileItIsEmpty() {
        let empty = decide("ann", ClusterAdmissionState(version: 3, time: 1_000, memberCount: 0))
        #expect(empty.refusal == nil && empty.role == "o" && empty.counts == 0...0)
        let taken = decide("bob", ClusterAdmissionState(version: 3, time: 1_000, memberCount: 2))
        #expect(taken.refusal == nil && taken.role == "" && taken.counts == 1...Int.max)
    }

    @Test func theLimitHoldsTheDecisionToTheCountsBelowIt() {
        let room = ClusterAdmissionState(version: 1, time: 1_000, memberCount: 2, memberLimit: 3)
        let admitted = decide("cid", room)
        #expect(admitted.refusal == nil && admitted.counts == 1...2)
        var full = room
        full.memberCount = 3
        let refused = decide("cid", full)
        #expect(refused.refusal?.code == .roomFull && refused.counts == 3...Int.max)
        // The invited pass the limit, relying on an invitation that must not have expired.
        full.invitations = ["cid": 2_000]
        let invited = decide("cid", full)
        #expect(invited.refusal == nil && invited.reliesOnInvitation && invited.counts == 1...Int.max)
        full.time = 2_000
        #expect(decide("cid", full).refusal?.code == .roomFull, "an invitation expires at its time")
    }

    @Test func bansKeysAndInviteOnlyAreTheRoomRulesAndAServerOperatorPassesThem() {
        let ban = BanEntry(mask: "address:10.0.0.0/8", setBy: "ann", time: 1, reason: "spam")
        let room = ClusterAdmissionState(version: 1, time: 1_000, memberCount: 1, inviteOnly: false, key: "s3cret", bans: [ban])
        #expect(decide("eve", key: "s3cret", room).refusal?.code == .banned)
        #expect(decide("dan", address: "192.0.2.1", room).refusal?.code == .badRoomKey)
        #expect(decide("dan", key: "s3cret", address: "192.0.2.1", room).refusal == nil)
        #expect(decide("root", account: "root", admin: true, room).refusal == nil)
        var closed = room
        closed.inviteOnly = true
        #expect(decide("dan", key: "s3cret", address: "192.0.2.1", closed).refusal?.code == .inviteOnly)
    }

    @Test func aRegisteredRoomGivesItsFounderAndItsAccountsTheirRolesAndNoGuestOp() {
        let room = ClusterAdmissionState(
            version: 1, time: 1_000, memberCount: 0, founder: "ann", inviteOnly: true, accountRoles: ["bob": "v", "cid": "ov"])
        #expect(decide("ann", account: "ann", room).role == "o")
        #expect(decide("bob", account: "bob", room).role == "v")
        #expect(decide("cid", account: "cid", room).role == "o", "an account holds one role, op before voice")
        #expect(decide("dan", room).refusal?.code == .inviteOnly)
        var open = room
        open.inviteOnly = false
        let guest = decide("dan", open)
        #expect(guest.refusal == nil && guest.role == "" && guest.counts == 0...Int.max, "no guest creates a registered room")
    }
}
