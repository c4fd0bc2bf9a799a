import ChatClient
import ChatProtocol
import Foundation
import Testing

@Suite struct MessageRendererTests {
    // 2026-01-01T09:05:00Z
    let time: UInt64 = 1_767_258_300_000
    let utc = TimeZone(identifier: "UTC")!

    private var everyEvent: [ChatEvent] {
        [
            .message(room: "general", time: time, sender: "alice", text: "hello", replayed: false),
            .action(room: "general", time: time, sender: "alice", text: "waves", replayed: true),
            .direct(time: time, sender: "alice", recipient: "bob", text: "psst", outgoing: false),
            .direct(time: time, sender: "bob", recipient: "alice", text: "hi", outgoing: true),
            .joined(room: "general", time: time, nick: "bob"),
            .left(room: "general", time: time, nick: "bob"),
            .quit(room: "general", time: time, nick: "bob", reason: "connection reset"),
            .nickChanged(room: "general", time: time, old: "bob", new: "bobby"),
            .topic(room: "general", time: time, setBy: "alice", text: "Swift sockets"),
            .members(room: "general", time: time, nicks: ["alice", "bob"]),
            .roomList(time: time, rooms: [RoomInfo(name: "general", memberCount: 2, topic: "Swift")]),
            .marker(room: "general", time: time, text: "3 new since you left"),
            .notice(time: time, text: "connected"),
            .error(time: time, text: "no such nick"),
        ]
    }

    @Test func theRoomListIsOneRoomALineTopicsLinedUpAndNoTrailingSpace() {
        let renderer = MessageRenderer(colour: false, timeZone: utc)
        let list = renderer.render(.roomList(time: 1_778_576_733_000, rooms: [
            RoomInfo(name: "dev", memberCount: 1, topic: ""),
            RoomInfo(name: "general", memberCount: 12, topic: "Swift"),
            RoomInfo(name: "ops", memberCount: 1, topic: "incidents only"),
        ]))
        #expect(list.split(separator: "\n") == [
            "09:05 -- 3 rooms:",
            "09:05 -- #dev      1 member",
            "09:05 -- #general  12 members  Swift",
            "09:05 -- #ops      1 member   incidents only",
        ])
    }

    @Test func plainRenderingHasNoEscapeCodes() {
        let renderer = MessageRenderer(colour: false, ownNick: "alice", timeZone: utc)
        for event in everyEvent {
            let line = renderer.render(event)
            #expect(!line.contains("\u{1B}"), "no escape codes without colour: \(line)")
            // The room list is one room a line; every other event is one line.
            if case .roomList = event { continue }
            #expect(!line.contains("\n"), "one line per event: \(line)")
        }
    }

    @Test func plainLinesReadLikeAChatLog() {
        let renderer = MessageRenderer(colour: false, timeZone: utc)
        let lines = everyEvent.map { renderer.render($0) }
        #expect(lines == [
            "09:05 #general <alice> hello",
            "09:05 #general * alice waves",
            "09:05 *alice* psst",
            "09:05 -> *alice* hi",
            "09:05 #general -!- bob joined",
            "09:05 #general -!- bob left",
            "09:05 #general -!- bob quit (connection reset)",
            "09:05 #general -!- bob is now known as bobby",
            "09:05 #general -!- topic: Swift sockets (set by alice)",
            "09:05 #general -!- members (2): alice bob",
            "09:05 -- 1 room:\n09:05 -- #general  2 members  Swift",
            "09:05 #general — 3 new since you left —",
            "09:05 -- connected",
            "09:05 !! no such nick",
        ])
    }

    @Test func linesFromOtherRoomsAreSetApart() {
        var renderer = MessageRenderer(colour: false, timeZone: utc)
        renderer.marksOtherRooms = true
        renderer.currentRoom = "general"
        #expect(renderer.render(.message(room: "general", time: time, sender: "bob", text: "here", replayed: false))
                == "09:05 #general <bob> here")
        #expect(renderer.render(.message(room: "dev", time: time, sender: "bob", text: "there", replayed: false))
                == "09:05 [#dev] <bob> there", "another room's line shows its room in brackets")
    }

    @Test func mentionsOfOurNickAreHighlighted() {
        let renderer = MessageRenderer(colour: true, ownNick: "alice", timeZone: utc)
        let mention = renderer.render(.message(room: "general", time: time, sender: "bob", text: "Alice: look", replayed: false))
        let other = renderer.render(.message(room: "general", time: time, sender: "bob", text: "malice aforethought", replayed: false))
        let own = renderer.render(.message(room: "general", time: time, sender: "alice", text: "I am alice", replayed: false))
        #expect(mention.contains("\u{1B}[1;33mAlice: look"), "a mention is bold yellow: \(mention.debugDescription)")
        #expect(!other.contains("\u{1B}[1;33m"), "a nick inside a word is no mention")
        #expect(!own.contains("\u{1B}[1;33m"), "our own lines are not highlighted")
        #expect(TerminalText.rows(of: mention, columns: 32).map(TerminalText.plain) == ["09:05 #general <bob> Alice: look"],
                "the colour codes take no cells: the line fits its 32 characters")
    }

    @Test func eachNickKeepsOneColourWhateverItsCase() {
        let renderer = MessageRenderer(colour: true, timeZone: utc)
        let code = MessageRenderer.colourCode(for: "Alice")
        #expect(MessageRenderer.colourCode(for: "alice") == code, "nicks differing in case share a colour")
        let line = renderer.render(.message(room: "general", time: time, sender: "Alice", text: "hi", replayed: false))
        #expect(line.contains("\u{1B}[\(code)mAlice\u{1B}[0m"), "the nick is wrapped in its colour: \(line.debugDescription)")
        let spread = Set(["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"].map(MessageRenderer.colourCode))
        #expect(spread.count > 2, "different nicks get different colours")
    }

    @Test func ownNickIsBold() {
        let renderer = MessageRenderer(colour: true, ownNick: "alice", timeZone: utc)
        #expect(renderer.nick("ALICE").hasPrefix("\u{1B}[1;"), "our own nick is bold")
        #expect(!renderer.nick("bob").hasPrefix("\u{1B}[1;"), "other nicks are not")
    }

    @Test func presenceErrorsAndDirectMessagesHaveDistinctStyles() {
        let renderer = MessageRenderer(colour: true, timeZone: utc)
        let presence = renderer.render(.joined(room: "general", time: time, nick: "bob"))
        let error = renderer.render(.error(time: time, text: "nope"))
        let direct = renderer.render(.direct(time: time, sender: "bob", recipient: "me", text: "hi", outgoing: false))
        #expect(presence.contains("\u{1B}[2;37m-!- bob joined"), "presence is dim")
        #expect(error.contains("\u{1B}[1;31m!! nope"), "errors are bold red")
        #expect(direct.contains("\u{1B}[1;35m*bob*"), "direct messages are bold magenta")
    }

    @Test func controlCharactersFromPeersCannotReachTheTerminal() {
        let renderer = MessageRenderer(colour: false, timeZone: utc)
        let line = renderer.render(.message(room: "general", time: time, sender: "mallory", text: "\u{1B}[2Jgone\r\u{7}\u{9B}x\tok", replayed: false))
        #expect(line == "09:05 #general <mallory> ^[[2Jgone^M^G\u{FFFD}x ok")
    }

    @Test func colourOnlyOnATerminalWithoutNoColor() {
        #expect(MessageRenderer.wantsColour(isTerminal: true, environment: ["TERM": "xterm"]))
        #expect(!MessageRenderer.wantsColour(isTerminal: false, environment: [:]), "no colour into pipes")
        #expect(!MessageRenderer.wantsColour(isTerminal: true, environment: ["NO_COLOR": "1"]), "NO_COLOR wins")
        #expect(MessageRenderer.wantsColour(isTerminal: true, environment: ["NO_COLOR": ""]), "an empty NO_COLOR does not count")
    }
}

@Suite struct TerminalTextTests {
    @Test func sanitizedLeavesUTF8Alone() {
        #expect(TerminalText.sanitized("naïve 日本 👋") == "naïve 日本 👋")
        #expect(TerminalText.sanitized("a\u{7F}b") == "a^?b")
        #expect(TerminalText.sanitized("a\u{1B}[2Jb\tc") == "a^[[2Jb c", "escape codes become visible text")
    }

    @Test func bidiControlsAndSeparatorsAreMadeVisible() {
        #expect(TerminalText.sanitized("abc\u{202E}fed") == "abc<U+202E>fed", "a right-to-left override cannot reverse the rest")
        #expect(TerminalText.sanitized("one\u{2028}two\u{2029}") == "one<U+2028>two<U+2029>", "no line or paragraph break")
        #expect(TerminalText.sanitized("\u{2066}x\u{2069}\u{200F}") == "<U+2066>x<U+2069><U+200F>")
        #expect(TerminalText.sanitized("\u{85}") == "\u{FFFD}", "C1 controls")
    }

    @Test func cellWidthsFollowTheTerminal() {
        #expect(TerminalText.cellWidth(of: "abc") == 3)
        #expect(TerminalText.cellWidth(of: "日本語") == 6, "CJK is double width")
        #expect(TerminalText.cellWidth(of: "😀") == 2, "emoji presentation is double width")
        #expect(TerminalText.cellWidth(of: "e\u{301}") == 1, "a combining accent takes no cell")
        #expect(TerminalText.cellWidth(of: "ｈ") == 2, "full-width Latin")
        #expect(TerminalText.cellWidth(of: "\u{200D}") == 0, "zero width joiner")
        #expect(TerminalText.cellWidth(of: "\u{E000}") == 1, "private use: one cell, as terminals draw it")
        #expect(TerminalText.cellWidth(of: Unicode.Scalar(0x50000)!) == 1, "unassigned: one cell, never 0")
        #expect(TerminalText.cellWidth(of: "🇫🇷" as Character) == 2, "a flag is two regional indicators of one cell each")
    }

    @Test func prefixFitsWholeCharacters() {
        #expect(TerminalText.prefix(of: "日本語", fitting: 5) == "日本", "a wide character that does not fit is left out")
        #expect(TerminalText.prefix(of: "abc", fitting: 10) == "abc")
    }
}

@Suite struct ReconnectBackoffTests {
    @Test func nominalDelayDoublesUpToTheMaximum() {
        let backoff = ReconnectBackoff(initial: .milliseconds(500), maximum: .seconds(30))
        #expect(backoff.nominalDelay(attempt: 1) == .milliseconds(500))
        #expect(backoff.nominalDelay(attempt: 2) == .seconds(1))
        #expect(backoff.nominalDelay(attempt: 4) == .seconds(4))
        #expect(backoff.nominalDelay(attempt: 50) == .seconds(30), "capped")
    }

    @Test func delaysStartAgainOnlyAfterAStableSession() {
        let backoff = ReconnectBackoff(stableAfter: .seconds(60))
        #expect(backoff.nextAttempt(after: 0, sessionLasted: nil) == 1)
        #expect(backoff.nextAttempt(after: 3, sessionLasted: nil) == 4, "a failed dial counts")
        #expect(backoff.nextAttempt(after: 3, sessionLasted: .milliseconds(200)) == 4,
                "a server that welcomes and drops at once keeps the delays growing")
        #expect(backoff.nextAttempt(after: 7, sessionLasted: .seconds(61)) == 1, "a session that stayed up starts again")
        #expect(backoff.nextAttempt(after: 7, sessionLasted: .milliseconds(200), settled: true) == 1,
                "so does one in which the server answered: it is back, and its next restart is redialled at once")
        #expect(backoff.nextAttempt(after: 7, sessionLasted: nil, settled: true) == 8, "no session, nothing settled")
    }

    @Test func jitteredDelayStaysBetweenHalfAndAllOfTheNominal() {
        let backoff = ReconnectBackoff()
        var generator = SystemRandomNumberGenerator()
        var seen: Set<Duration> = []
        for attempt in 1...8 {
            for _ in 0..<50 {
                let delay = backoff.delay(attempt: attempt, using: &generator)
                let nominal = backoff.nominalDelay(attempt: attempt)
                #expect(delay >= nominal / 2 && delay <= nominal, "attempt \(attempt): \(delay) within [\(nominal / 2), \(nominal)]")
                seen.insert(delay)
            }
        }
        #expect(seen.count > 8, "delays are spread, not fixed")
    }
}
