import ChatProtocol
import Testing

@testable import ChatCore

/// A room's rules as pure functions (`RoomRules`): what they decide from a room's settings and
/// who asks, with no core, store or network — what every mode is to apply alike.
@Suite("A room's rules, without a room")
struct RoomRulesTests {
    static let guest = RoomActor(nick: "eve", address: "198.51.100.7")
    static let founder = RoomActor(nick: "Ann", account: "ann", address: "192.0.2.1", isMember: true, isOp: true)

    static func settings(_ change: (inout RoomSettings) -> Void) -> RoomSettings {
        var settings = RoomSettings()
        change(&settings)
        return settings
    }

    static func ban(_ mask: String) -> Ban {
        let parsed = try! BanMask(parsing: mask, allowsRoom: false)
        return Ban(mask: parsed, entry: BanEntry(mask: parsed.canonical, setBy: "ann", time: 1, reason: ""))
    }

    @Test func aBanKeepsOutEvenTheInvitedAndTheKeyHolderButNotAServerOperator() {
        let room = Self.settings {
            $0.bans = [Self.ban("address:198.51.100.0/24")]
            $0.key = "k"
        }
        let refusal = RoomRules.admission(
            of: Self.guest, to: "r", settings: room, memberCount: 1, invited: true, key: "k", keyThrottle: nil)
        #expect(refusal?.code == .banned)
        var admin = Self.guest
        admin.isServerOperator = true
        #expect(RoomRules.admission(of: admin, to: "r", settings: room, memberCount: 1, invited: false, key: nil, keyThrottle: nil) == nil)
    }

    @Test func theFounderAndAnAccountWithARolePassInviteOnlyTheKeyAndTheLimit() {
        let room = Self.settings {
            $0.founder = "ann"
            $0.inviteOnly = true
            $0.key = "k"
            $0.memberLimit = 1
            $0.accountRoles["bob"] = .voice
        }
        let bob = RoomActor(nick: "bob", account: "bob")
        for joiner in [Self.founder, bob] {
            #expect(RoomRules.admission(of: joiner, to: "r", settings: room, memberCount: 1, invited: false, key: nil, keyThrottle: nil) == nil)
        }
        let refusal = RoomRules.admission(of: Self.guest, to: "r", settings: room, memberCount: 0, invited: false, key: "k", keyThrottle: nil)
        #expect(refusal?.code == .inviteOnly)
    }

    @Test func aThrottledGuesserIsNotComparedAndAWrongKeyIsNamedThenTheLimitCounts() {
        let room = Self.settings {
            $0.key = "right"
            $0.memberLimit = 2
        }
        let throttled: RoomRefusal = (.throttled, "too many wrong keys for #r")
        #expect(RoomRules.admission(of: Self.guest, to: "r", settings: room, memberCount: 0, invited: false, key: "right", keyThrottle: throttled)?.code == .throttled)
        #expect(RoomRules.admission(of: Self.guest, to: "r", settings: room, memberCount: 0, invited: false, key: nil, keyThrottle: nil)?.reason == "#r needs a key (joinWithKey)")
        #expect(RoomRules.admission(of: Self.guest, to: "r", settings: room, memberCount: 0, invited: false, key: "wrong", keyThrottle: nil)?.reason == "wrong key for #r")
        #expect(RoomRules.admission(of: Self.guest, to: "r", settings: room, memberCount: 2, invited: false, key: "right", keyThrottle: nil)?.code == .roomFull)
        #expect(RoomRules.admission(of: Self.guest, to: "r", settings: room, memberCount: 2, invited: true, key: nil, keyThrottle: nil) == nil, "an invitation passes the limit")
    }

    @Test func aRegisteredRoomGivesRolesOnlyByAccountAndAnUnregisteredOneToItsCreator() {
        let registered = Self.settings {
            $0.founder = "ann"
            $0.accountRoles["bob"] = .voice
        }
        #expect(RoomRules.rolesOnJoining(Self.founder, settings: registered, creates: true) == (true, false))
        #expect(RoomRules.rolesOnJoining(RoomActor(nick: "bob", account: "bob"), settings: registered, creates: false) == (false, true))
        #expect(RoomRules.rolesOnJoining(Self.guest, settings: registered, creates: true) == (false, false), "no takeover by joining first")
        #expect(RoomRules.rolesOnJoining(Self.guest, settings: RoomSettings(), creates: true) == (true, false))
        #expect(RoomRules.rolesOnJoining(Self.guest, settings: RoomSettings(), creates: false) == (false, false))
    }

    @Test func onlyOpsAndTheVoicedSpeakInAModeratedRoomAndOnlyOpsAndServerOperatorsSetALockedTopic() {
        let room = Self.settings {
            $0.moderated = true
            $0.topicLock = true
        }
        var member = RoomActor(nick: "bob", isMember: true)
        #expect(RoomRules.speaking(member, in: "r", settings: room)?.code == .moderated)
        #expect(RoomRules.settingTopic(member, in: "r", settings: room)?.code == .notOperator)
        member.isVoiced = true
        #expect(RoomRules.speaking(member, in: "r", settings: room) == nil)
        #expect(RoomRules.settingTopic(member, in: "r", settings: room)?.code == .notOperator, "a voice sets no locked topic")
        member.isServerOperator = true
        #expect(RoomRules.settingTopic(member, in: "r", settings: room) == nil)
    }

    @Test func nobodyButTheFounderOrAServerOperatorKicksOrDeopsTheFounder() {
        let room = Self.settings { $0.founder = "ann" }
        let op = RoomActor(nick: "op", account: "op", isMember: true, isOp: true)
        #expect(RoomRules.kicking(Self.founder, named: "ann", by: op, in: "r", settings: room)?.code == .notOperator)
        #expect(RoomRules.kicking(nil, named: "ghost", by: op, in: "r", settings: room)?.reason == "ghost is not in #r")
        var admin = op
        admin.isServerOperator = true
        #expect(RoomRules.kicking(Self.founder, named: "ann", by: admin, in: "r", settings: room) == nil)
        let deop = RoomRules.modeChange(
            .op, on: false, argument: ModeArgument(announced: "ann"), target: Self.founder, by: op, in: "r", settings: room,
            wallMillis: 0, registrationLimit: { _ in nil }, accountName: { $0 })
        guard case .refused(let refusal) = deop else {
            Issue.record("an op deopped the founder")
            return
        }
        #expect(refusal.code == .notOperator)
    }

    @Test func anOpGivenInARegisteredRoomIsRememberedForTheAccountAndTakenBackWithIt() {
        let room = Self.settings { $0.founder = "ann" }
        let bob = RoomActor(nick: "Bob", account: "bob", isMember: true)
        func change(_ on: Bool, in settings: RoomSettings) -> ModeChangeOutcome? {
            let decision = RoomRules.modeChange(
                .op, on: on, argument: ModeArgument(announced: "bob"), target: bob, by: Self.founder, in: "r", settings: settings,
                wallMillis: 0, registrationLimit: { _ in nil }, accountName: { $0 })
            if case .changed(let outcome) = decision { return outcome }
            return nil
        }
        let given = change(true, in: room)
        #expect(given?.settings.accountRoles == ["bob": .op])
        #expect(given?.announced == "Bob", "announced as the member's session spells its nick")
        #expect(given.map { $0.role?.role == .op && $0.role?.on == true } == true)
        #expect(change(false, in: given?.settings ?? room)?.settings.accountRoles.isEmpty == true)
    }

    @Test func aBanIsRecordedWithItsSetterAndTimeCountedAgainstTheCapAndKicksWhomItMatches() throws {
        let mask = try BanMask(parsing: "nick:eve", allowsRoom: false)
        let argument = ModeArgument(announced: "nick:eve spam", mask: mask, reason: "spam")
        let decision = RoomRules.modeChange(
            .ban, on: true, argument: argument, target: nil, by: Self.founder, in: "r", settings: RoomSettings(), wallMillis: 42,
            registrationLimit: { _ in nil }, accountName: { $0 })
        guard case .changed(let outcome) = decision else {
            Issue.record("the ban was refused: \(decision)")
            return
        }
        #expect(outcome.settings.bans.map(\.entry) == [BanEntry(mask: "nick:eve", setBy: "Ann", time: 42, reason: "spam")])
        #expect(outcome.banKicks == mask)
        let full = Self.settings { $0.bans = (0..<ModerationLimits.maxRoomBans).map { Self.ban("nick:n\($0)") } }
        let refused = RoomRules.modeChange(
            .ban, on: true, argument: argument, target: nil, by: Self.founder, in: "r", settings: full, wallMillis: 42,
            registrationLimit: { _ in nil }, accountName: { $0 })
        guard case .refused(let refusal) = refused else {
            Issue.record("a ban past the cap was taken")
            return
        }
        #expect(refusal.code == .listFull)
    }

    @Test func registeringNeedsALoginNoOtherFounderAndRoomUnderTheLimits() {
        let bob = RoomActor(nick: "bob", account: "bob", isMember: true, isOp: true)
        func register(by setter: RoomActor, in settings: RoomSettings, limit: String? = nil) -> ModeChangeDecision {
            RoomRules.modeChange(
                .registered, on: true, argument: ModeArgument(), target: nil, by: setter, in: "r", settings: settings, wallMillis: 0,
                registrationLimit: { _ in limit }, accountName: { $0.uppercased() })
        }
        var guestOp = Self.guest
        guestOp.isOp = true
        if case .refused(let refusal) = register(by: guestOp, in: RoomSettings()) { #expect(refusal.code == .notLoggedIn) } else { Issue.record("a guest registered") }
        if case .refused(let refusal) = register(by: bob, in: Self.settings { $0.founder = "ann" }) {
            #expect(refusal.reason == "#r is registered to ANN")
        } else {
            Issue.record("bob took ann's room")
        }
        if case .refused(let refusal) = register(by: bob, in: RoomSettings(), limit: "full") { #expect(refusal.code == .listFull) } else { Issue.record("past the limit") }
        if case .changed(let outcome) = register(by: bob, in: RoomSettings()) {
            #expect(outcome.settings.founder == "bob" && outcome.announced == "BOB")
        } else {
            Issue.record("bob could not register a free room")
        }
    }
}

/// How long a throttled client is told to wait, as a person reads it.
@Suite("Waits told to a client")
struct WaitTextTests {
    @Test(arguments: [
        (UInt64(1), "1 s"), (1_000, "1 s"), (1_001, "2 s"), (119_000, "119 s"), (120_000, "2 min"), (3_428_000, "58 min"),
        (7_140_000, "119 min"), (7_200_000, "2 h 0 min"), (7_260_001, "2 h 2 min"),
    ])
    func secondsThenMinutesThenHoursRoundedUp(millis: UInt64, text: String) {
        #expect(ChatCore.waitText(millis) == text)
    }
}
