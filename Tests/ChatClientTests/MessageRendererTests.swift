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
            .notice(time: time, text: "connected"),
            .error(time: time, text: "no such nick"),
        ]
    }

    @Test func plainRenderingHasNoEscapeCodes() {
        let renderer = MessageRenderer(colour: false, ownNick: "alice", timeZone: utc)
        for event in everyEvent {
            let line = renderer.render(event)
            #expect(!line.contains("\u{1B}"), "no escape codes without colour: \(line)")
            #expect(!line.contains("\n"), "one line per event: \(line)")
        }
    }

    @Test func plainLinesReadLikeAChatLog() {
        let renderer = MessageRenderer(colour: false, timeZone: utc)
        let lines = everyEvent.map(renderer.render)
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
            "09:05 -- rooms: #general (2) Swift",
            "09:05 -- connected",
            "09:05 !! no such nick",
        ])
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
    @Test func cursorRowCountsWrappedRows() {
        #expect(TerminalText.cursorRow(cellWidths: Array(repeating: 1, count: 79), columns: 80) == 0)
        #expect(TerminalText.cursorRow(cellWidths: Array(repeating: 1, count: 80), columns: 80) == 1,
                "a cursor that has just filled a row stands at the start of the next")
        #expect(TerminalText.cursorRow(cellWidths: Array(repeating: 1, count: 161), columns: 80) == 2)
    }

    @Test func wideCharacterThatDoesNotFitStartsTheNextRow() {
        // 79 narrow cells leave one column, too few for a double-width character.
        #expect(TerminalText.cursorRow(cellWidths: Array(repeating: 1, count: 79) + [2], columns: 80) == 1)
        #expect(TerminalText.cursorRow(cellWidths: [1, 0, 1], columns: 2) == 1, "combining marks take no cell")
    }

    @Test func sanitizedLeavesUTF8Alone() {
        #expect(TerminalText.sanitized("naïve 日本 👋") == "naïve 日本 👋")
        #expect(TerminalText.sanitized("a\u{7F}b") == "a^?b")
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
