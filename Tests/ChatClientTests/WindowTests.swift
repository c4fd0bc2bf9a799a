import ChatClient
import ChatProtocol
import Foundation
import Testing

/// Windows own their lines: buffers, scrollback, routing, the status line, reconnects in one
/// line, and the commands that act on windows — all without a terminal.
@Suite struct WindowTests {
    @Test func aBufferKeepsItsLimitAndTheViewStaysWhileScrolledBack() {
        var buffer = WindowBuffer(limit: 5)
        for index in 1...8 { buffer.append("line \(index)") }
        #expect(Array(buffer.lines) == (4...8).map { "line \($0)" }, "the oldest lines go past the limit")
        #expect(buffer.view(rows: 2, columns: 80) == ["line 7", "line 8"])
        buffer.scroll(rows: 2, screenRows: 2, columns: 80)
        #expect(buffer.isScrolledBack)
        #expect(buffer.view(rows: 2, columns: 80) == ["line 5", "line 6"])
        buffer.append("line 9")
        #expect(buffer.view(rows: 2, columns: 80) == ["line 5", "line 6"], "a new line does not move a scrolled-back view")
        buffer.scroll(rows: 100, screenRows: 2, columns: 80)
        #expect(buffer.view(rows: 2, columns: 80) == ["line 5", "line 6"], "scrolling stops with the first line at the top of a full screen")
        buffer.scroll(rows: -100, screenRows: 2, columns: 80)
        #expect(!buffer.isScrolledBack && buffer.view(rows: 1, columns: 80) == ["line 9"])
        buffer.limit = 2
        #expect(Array(buffer.lines) == ["line 8", "line 9"], "a smaller limit drops the oldest at once")
        buffer.clear()
        #expect(buffer.lines.isEmpty && buffer.view(rows: 3, columns: 80).isEmpty)
    }

    @Test func scrollingCountsTheRowsAWrappedLineTakes() {
        var buffer = WindowBuffer(limit: 10)
        buffer.append("one")
        buffer.append("aaaaabbbbbccccc")  // three rows at 5 columns
        buffer.append("two")
        #expect(buffer.view(rows: 3, columns: 5) == ["bbbbb", "ccccc", "two"])
        buffer.scroll(rows: 2, screenRows: 3, columns: 5)
        #expect(buffer.offset == 1 && buffer.hiddenRows == 1, "the view ends inside the wrapped line")
        #expect(buffer.view(rows: 3, columns: 5) == ["one", "aaaaa", "bbbbb"])
        buffer.scroll(rows: 1, screenRows: 3, columns: 5)
        #expect(buffer.view(rows: 3, columns: 5) == ["one", "aaaaa", "bbbbb"], "the first line stays at the top of a full screen")
        buffer.scroll(rows: -1, screenRows: 3, columns: 5)
        #expect(buffer.view(rows: 3, columns: 5) == ["aaaaa", "bbbbb", "ccccc"])
        buffer.append("three")
        #expect(buffer.view(rows: 3, columns: 5) == ["aaaaa", "bbbbb", "ccccc"], "a new line leaves a row-scrolled view in place")
        buffer.scroll(rows: -2, screenRows: 3, columns: 5)
        #expect(buffer.view(rows: 3, columns: 5) == ["ccccc", "two", "three"] && !buffer.isScrolledBack)
        // At 15 columns the same line is one row: a resize keeps the view within the line.
        buffer.scroll(rows: 3, screenRows: 3, columns: 5)
        #expect(buffer.view(rows: 2, columns: 15) == ["one", "aaaaabbbbbccccc"])
    }

    @Test func aLineTallerThanTheViewShowsItsLastRowsOrThoseScrolledTo() {
        var buffer = WindowBuffer(limit: 10)
        buffer.append("before")
        buffer.append(String(repeating: "x", count: 8) + String(repeating: "y", count: 8))  // 8 rows at 2 columns
        #expect(buffer.view(rows: 3, columns: 2) == ["yy", "yy", "yy"])
        buffer.scroll(rows: 5, screenRows: 3, columns: 2)
        #expect(buffer.view(rows: 3, columns: 2) == ["xx", "xx", "xx"], "the rows scrolled to")
        buffer.scroll(rows: 3, screenRows: 3, columns: 2)
        #expect(buffer.view(rows: 3, columns: 2) == ["be", "fo", "re"], "the line before it, three rows")
    }

    @Test func rowsAreCutAsTheTerminalWrapsAndKeepTheirColours() {
        #expect(TerminalText.rows(of: "abcdef", columns: 3) == ["abc", "def"])
        #expect(TerminalText.rows(of: "", columns: 3) == [""])
        #expect(TerminalText.rows(of: "ab日本", columns: 3) == ["ab", "日", "本"], "a wide character that does not fit starts the next row")
        #expect(TerminalText.rows(of: "abe\u{301}d", columns: 3) == ["abe\u{301}", "d"], "a combining mark stays with its character")
        let red = "\u{1B}[1;31m"
        let reset = "\u{1B}[0m"
        #expect(TerminalText.rows(of: "a\(red)bcd\(reset)ef", columns: 2) == ["a\(red)b\(reset)", "\(red)cd\(reset)", "ef"],
                "a row cut inside a style ends with a reset and the next starts with the style")
    }

    @Test func rowsAreCutAtWordsUnderTheIndentMark() {
        let mark = String(TerminalText.indentMark)
        #expect(TerminalText.rows(of: "09:04 <bob> " + mark + "one two three four five", columns: 24)
                == ["09:04 <bob> one two", "            three four", "            five"],
                "continuation rows start under the text, and no word is cut")
        #expect(TerminalText.rows(of: "09:04 <bob> " + mark + "one two three four five", columns: 20)
                == ["09:04 <bob> one two", "          three four", "          five"],
                "an indent of more than half the width is held to half")
        #expect(TerminalText.rows(of: "ab cd ef", columns: 5) == ["ab cd", "ef"], "no mark: no indent, the space at the cut not drawn")
        #expect(TerminalText.rows(of: "12 " + mark + "abcdefghij", columns: 8) == ["12 abcde", "   fghij"],
                "a word wider than the row is cut where the row ends")
        #expect(TerminalText.plain("a" + mark + "b") == "ab", "the mark is not text")
        let green = "\u{1B}[32m"
        let reset = "\u{1B}[0m"
        #expect(TerminalText.rows(of: "x " + mark + green + "aa bb" + reset, columns: 4) == ["x \(green)aa\(reset)", "  \(green)bb\(reset)"],
                "a style cut at a space goes on after the indent")
    }

    @Test func aHundredThousandLineLimitIsReachedAndHeld() {
        var buffer = WindowBuffer(limit: 100_000)
        for index in 0..<150_000 { buffer.append("l\(index)") }
        #expect(buffer.lines.count == 100_000)
        #expect(buffer.lines.first == "l50000" && buffer.lines.last == "l149999")
    }

    @Test func lastlogMatchesVisibleTextIgnoringCaseAndColour() {
        var buffer = WindowBuffer(limit: 10)
        buffer.append("09:00 <bob> Deploy at noon")
        buffer.append("09:01 \u{1B}[1;33m<carol>\u{1B}[0m nothing here")
        buffer.append("09:02 <carol> the deploy is done")
        #expect(buffer.matching("DEPLOY") == ["09:00 <bob> Deploy at noon", "09:02 <carol> the deploy is done"])
        #expect(buffer.matching("<carol> nothing").count == 1, "escape codes do not hide a match")
    }

    @Test func lastlogDoesNotSearchItsOwnAnswers() {
        var buffer = WindowBuffer(limit: 6)
        buffer.append("09:00 <bob> deploy at noon")
        // What /lastlog deploy shows: a header and the copy, both holding the word.
        buffer.append("10:00 -- lastlog: 1 line contains \"deploy\":", searchable: false)
        buffer.append("09:00 <bob> deploy at noon", searchable: false)
        buffer.append("10:01 <carol> deploy done")
        #expect(buffer.matching("deploy") == ["09:00 <bob> deploy at noon", "10:01 <carol> deploy done"],
                "the answer to the last search is not found by the next")
        // Past the limit and after /clear, lines keep their kind.
        for index in 1...4 { buffer.append("10:0\(index) <bob> deploy \(index)", searchable: index.isMultiple(of: 2)) }
        #expect(Array(buffer.lines) == ["09:00 <bob> deploy at noon", "10:01 <carol> deploy done"] + (1...4).map { "10:0\($0) <bob> deploy \($0)" })
        #expect(buffer.matching("deploy") == ["10:01 <carol> deploy done", "10:02 <bob> deploy 2", "10:04 <bob> deploy 4"])
        buffer.clear()
        buffer.append("11:00 <bob> deploy again")
        #expect(buffer.matching("deploy") == ["11:00 <bob> deploy again"])
    }

    private func connected(rooms: [String] = ["general", "dev"]) -> ClientSession {
        var session = ClientSession(nick: "alice", rooms: rooms, clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 2)
        for room in rooms { _ = session.receive(.joined(room: room, seq: 1, time: 1, nick: "alice")) }
        return session
    }

    @Test func eventsGoToTheirOwnWindows() {
        var session = connected()
        _ = session.receive(.direct(sender: "bob", recipient: "alice", time: 1, text: "psst"))
        #expect(session.window(for: .message(room: "dev", time: 1, sender: "bob", text: "x", replayed: false)) == .room("dev"))
        #expect(session.window(for: .direct(time: 1, sender: "BOB", recipient: "alice", text: "x", outgoing: false)) == .query("bob"))
        #expect(session.window(for: .direct(time: 1, sender: "alice", recipient: "bob", text: "x", outgoing: true)) == .query("bob"))
        #expect(session.window(for: .notice(time: 1, text: "x")) == .room("general"), "notices go to the current window")
        #expect(session.window(for: .members(room: "elsewhere", time: 1, nicks: [])) == .room("general"))
    }

    @Test func theStatusLineDropsQuietWindowsFirstAndNeverAMention() {
        var session = connected(rooms: (1...8).map { "room\($0)" })
        _ = session.receive(.message(room: "room3", seq: 2, time: 2, sender: "bob", text: "hi"))
        _ = session.receive(.message(room: "room8", seq: 2, time: 2, sender: "bob", text: "alice: look"))
        let wide = StatusLine.render(session: session, columns: 200)
        #expect(wide.contains("3:#room3(1)") && wide.contains("8:#room8(1!)") && !wide.contains("+"))
        let narrow = StatusLine.render(session: session, columns: 50)
        #expect(narrow == "alice | [1:#room1] 3:#room3(1) 8:#room8(1!) +5", "quiet windows go first: \(narrow)")
        let narrower = StatusLine.render(session: session, columns: 36)
        #expect(narrower == "alice | [1:#room1] 8:#room8(1!) +6", "then windows with news, never a mention: \(narrower)")
        #expect(StatusLine.render(session: session, columns: 200, scrolledBack: true).hasPrefix("alice -- more -- |"))
        // Narrower than the current window and the mention named: windows by number alone.
        let compact = StatusLine.render(session: session, columns: 30)
        #expect(compact == "alice | [1] 2 3(1) 4 8(1!) +3", "the mention is still there: \(compact)")
        #expect(StatusLine.render(session: session, columns: 20) == "alice | [1] 8(1!) +6")
        // Where even the count does not fit, it goes before the mention is cut.
        #expect(StatusLine.render(session: session, columns: 30, scrolledBack: true) == "alice -- more -- | [1] 8(1!)")
    }

    @Test func highlightWordsCountAsMentions() {
        var session = connected()
        session.highlightWords = ["deploy"]
        _ = session.receive(.message(room: "dev", seq: 2, time: 2, sender: "bob", text: "Deploy done"))
        #expect(session.activity[.room("dev")] == WindowActivity(unread: 1, mentioned: true))
        #expect(!ClientSession.mentions("redeployed", word: "deploy"), "whole words only")
    }

    private func texts(_ actions: [SessionAction]) -> [String] {
        actions.compactMap { action -> String? in
            guard let event = shownEvent(action) else { return nil }
            switch event {
            case .message(_, _, _, let text, _), .marker(_, _, let text), .notice(_, let text), .error(_, let text): return text
            default: return nil
            }
        }
    }

    @Test func aReconnectIsOneLinePlusTheMissedMessagesCountedAsUnread() {
        let rooms = ["general", "dev", "ops"]
        var session = connected(rooms: rooms)
        for room in rooms {
            _ = session.receive(.roomState(room: room, epoch: 5, firstSeq: 1, lastSeq: 1))
            _ = session.receive(.historyPage(room: room, epoch: 5, complete: true, entries: []))
        }
        session.disconnected()
        var shown: [String] = []
        shown += texts(session.connected(nick: "alice", motd: "welcome!", version: 2, server: "127.0.0.1:7000"))
        for room in rooms {
            shown += texts(session.receive(.joined(room: room, seq: 4, time: 4, nick: "alice")))
            shown += texts(session.receive(.membersPage(room: room, complete: true, nicks: ["alice", "bob"])))
            _ = session.receive(.roomState(room: room, epoch: 5, firstSeq: 1, lastSeq: room == "general" ? 1 : 3))
            let missed = room == "general" ? [] : [
                HistoryEntry(kind: .message, seq: 2, time: 2, sender: "bob", text: "\(room) a"),
                HistoryEntry(kind: .message, seq: 3, time: 3, sender: "bob", text: "\(room) b"),
            ]
            shown += texts(session.receive(.historyPage(room: room, epoch: 5, complete: true, entries: missed)))
        }
        #expect(shown == [
            "2 new since you left", "dev a", "dev b", "2 new since you left", "ops a", "ops b",
            "reconnected to 127.0.0.1:7000: 3 rooms, 4 new messages in 2 of them",
        ], "no joins, member lists, welcome or \"nothing new\": \(shown)")
        #expect(session.activity[.room("dev")]?.unread == 2 && session.activity[.room("ops")]?.unread == 2)
        #expect(session.activity[.room("general")] == nil, "the current window has nothing unread")
    }

    @Test func windowCommandsAndShortForms() throws {
        var session = connected()
        _ = session.perform(.query("bob"))
        #expect(try CommandParser.parse("/w 2") == .window(.number(2)))
        #expect(try CommandParser.parse("/win list") == .window(.list))
        #expect(try CommandParser.parse("/j #ops") == .join(room: "ops"))
        #expect(try CommandParser.parse("/q carol") == .query("carol"))
        #expect(try CommandParser.parse("/list") == .listRooms)
        #expect(try CommandParser.parse("/names") == .who(room: nil))
        #expect(try CommandParser.parse("/wc", aliases: ["wc": "window close"]) == .window(.close))
        #expect(try CommandParser.parse("/hi there", aliases: ["hi": "/msg bob"]) == .tell(nick: "bob", text: "there"))
        _ = session.perform(try #require(try CommandParser.parse("/window 2")))
        #expect(session.currentWindow == .room("dev"))
        _ = session.perform(try #require(try CommandParser.parse("/switch bob")))
        #expect(session.currentWindow == .query("bob"), "/switch takes an open query")
        _ = session.perform(try #require(try CommandParser.parse("/window #general")))
        #expect(session.currentWindow == .room("general"))
        #expect(texts(session.perform(.window(.list))) == ["1: #general (current)", "2: #dev", "3: bob"])
        #expect(texts(session.perform(.window(.number(9)))) == ["there is no window 9 (there are 3)"])
    }

    @Test func theMergedWindowIsFirstForReadingAndCountsNothingUnread() {
        var session = ClientSession(nick: "alice", rooms: ["general", "dev"], clock: { 1000 })
        session.addMergedWindow()
        _ = session.connected(nick: "alice", motd: "", version: 2)
        for room in ["general", "dev"] { _ = session.receive(.joined(room: room, seq: 1, time: 1, nick: "alice")) }
        #expect(session.windows == [.merged, .room("general"), .room("dev")] && session.currentWindow == .merged)
        _ = session.receive(.message(room: "dev", seq: 2, time: 2, sender: "bob", text: "hi"))
        #expect(session.activity.isEmpty, "whoever reads the merged window has seen every line")
        #expect(texts(session.perform(.say("hello"))) == ["the merged window is for reading; go to a room or query to talk (Alt-2…)"])
        #expect(session.window(for: .message(room: "dev", time: 1, sender: "bob", text: "x", replayed: false)) == .room("dev"),
                "lines still belong to their own windows (the display copies them into the merged one)")
        #expect(StatusLine.render(session: session, columns: 80) == "alice | [1:(all)] 2:#general 3:#dev")
    }

    @Test func whoForARoomThatIsNotThereIsAnError() {
        var session = connected()
        #expect(texts(session.receive(.membersPage(room: "nosuch", complete: true, nicks: []))) == ["there is no room #nosuch"])
    }
}

/// The config file: a strict TOML subset, errors with their line, settings and `/set`.
@Suite struct ConfigFileTests {
    @Test func aFullConfigReads() throws {
        let settings = try ClientSettings(parsing: """
            # mine
            nick = "alice"
            servers = ["127.0.0.1:7001", "[::1]:7002"]
            autojoin = ['#general', "#dev"]   # where I talk
            timestamp_format = "%H:%M:%S"
            colours = false
            buffer_lines = 100_000
            highlight = ["deploy", "on\\u0063all"]
            log = true
            account = "alice"
            account_password_file = "~/.chat-account"

            [tls]
            mode = "ca"
            ca_file = "~/ca.pem"

            [aliases]
            wc = "window close"
            """)
        #expect(settings.nick == "alice" && settings.servers == ["127.0.0.1:7001", "[::1]:7002"])
        #expect(settings.autojoin == ["#general", "#dev"] && settings.timestampFormat == "%H:%M:%S")
        #expect(!settings.colours && settings.bufferLines == 100_000 && settings.highlight == ["deploy", "oncall"] && settings.log)
        #expect(settings.account == "alice" && settings.accountPasswordFile == "~/.chat-account")
        #expect(settings.tlsMode == .ca && settings.tlsCAFile == "~/ca.pem" && settings.aliases == ["wc": "window close"])
        #expect(try ClientSettings(parsing: settings.rendered()) == settings, "what /save writes reads back the same")
    }

    @Test(arguments: [
        ("nick = \"a\"\nbuffer_lines = \"many\"", 2, "buffer_lines takes a whole number"),
        ("nick = alice", 1, "\"alice\" is not a value"),
        ("\n\ncolour = true", 3, "unknown setting colour"),
        ("highlight = [\"a\", \"b\"", 1, "an array is"),
        ("nick = \"a\"\nnick = \"b\"", 2, "nick is given twice"),
        ("[server]\nport = 1", 1, "unknown table [server] (the file has [tls] and [aliases])"),
        ("nick = \"a\"\n[colours]\n", 2, "unknown table [colours]"),
        ("\nnick = \"9lives\"", 2, "\"9lives\" is not a valid nick"),
        ("autojoin = [\"#general\", \"#bad room\"]", 1, "autojoin: \"#bad room\" is not a valid room"),
        ("\n\nservers = [\"nohost\"]", 3, "servers: nohost: expected HOST:PORT"),
        ("account = \"-x\"", 1, "account: \"-x\" is not a valid nick"),
        ("colours = true\ncolors = false", 2, "colors is colours again (line 1)"),
        ("[tls]\n\nmode = \"ca\"", 3, "needs ca_file"),
        ("nick = \"unclosed", 1, "a string is not closed"),
        ("buffer_lines = 0", 1, "buffer_lines is 1 to"),
    ])
    func aMalformedFileNamesTheLine(text: String, line: Int, reason: String) {
        #expect {
            _ = try ClientSettings(parsing: text)
        } throws: { error in
            guard let error = error as? ConfigFile.ParseError else { return false }
            return error.line == line && error.reason.contains(reason)
        }
    }

    @Test func setChangesTypedValues() throws {
        var settings = ClientSettings()
        try settings.set("highlight", typed: "deploy, oncall")
        try settings.set("log", typed: "on")
        try settings.set("buffer_lines", typed: "500")
        #expect(settings.highlight == ["deploy", "oncall"] && settings.log && settings.bufferLines == 500)
        #expect(settings.shown("highlight") == "[\"deploy\", \"oncall\"]")
        #expect(throws: ClientSettings.SettingError.self) { try settings.set("log", typed: "maybe") }
    }

    @Test func timestampsFollowTheFormat() {
        var renderer = MessageRenderer(colour: false, timeZone: .init(identifier: "UTC")!)
        renderer.timestampFormat = "%H:%M:%S"
        let time: UInt64 = 1_778_576_733_000  // 2026-05-12 09:05:33 UTC
        #expect(renderer.timestamp(time) == "09:05:33")
        #expect(renderer.format(time, "%Y-%m-%d %%") == "2026-05-12 %")
        #expect(renderer.dayChange(time) == "-- day changed to 2026-05-12 (Tuesday)")
        #expect(renderer.day(of: time + 86_400_000) == renderer.day(of: time) + 1)
    }

    @Test func daysAndWeekdaysAgreeWithFoundationsCalendarFor1970To2100() {
        let utc = TimeZone(identifier: "UTC")!
        let renderer = MessageRenderer(colour: false, timeZone: utc)
        let formatter = DateFormatter()
        formatter.timeZone = utc
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd (EEEE)"
        // Noon of every 37th day: every weekday, month and leap rule (2000 is one, 2100 is not).
        for day in stride(from: 0, to: 47_482, by: 37) {
            let time = UInt64(day) * 86_400_000 + 43_200_000
            #expect(renderer.day(of: time) == day)
            let expected = "-- day changed to " + formatter.string(from: Date(timeIntervalSince1970: Double(time) / 1000))
            #expect(renderer.dayChange(time) == expected)
        }
    }
}

/// The log files: where they go, their mode, the day's rotation, and a directory that cannot be written.
@Suite struct WindowLogsTests {
    @Test func linesGoToAPrivateFilePerWindowRotatedByDay() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("logs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var logs = WindowLogs(directory: directory.path + "/deep/er")
        let written = [
            logs.write("#general <bob> one", stamp: "2026-05-11 23:59:58", day: "2026-05-11", window: "#general", server: "127.0.0.1:7000"),
            logs.write("#general <bob> two", stamp: "2026-05-12 00:00:01", day: "2026-05-12", window: "#general", server: "127.0.0.1:7000"),
            logs.write("*../bob* hi", stamp: "2026-05-12 00:00:02", day: "2026-05-12", window: "../bob", server: "127.0.0.1:7000"),
        ]
        #expect(written == [true, true, true])
        let folder = directory.appendingPathComponent("deep/er/127.0.0.1:7000")
        let today = try String(contentsOf: folder.appendingPathComponent("#general.log"), encoding: .utf8)
        let yesterday = try String(contentsOf: folder.appendingPathComponent("#general.2026-05-11.log"), encoding: .utf8)
        #expect(today == "2026-05-12 00:00:01 #general <bob> two\n")
        #expect(yesterday == "2026-05-11 23:59:58 #general <bob> one\n", "the first line of a new day moves the old file aside")
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent(".._bob.log").path) == false)
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("_._bob.log").path), "a window name cannot leave the directory")
        let mode = try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("#general.log").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// A room's backlog from an earlier day arrives after the join line of today (a client
    /// started the morning after): its lines must not move today's file aside under today's date,
    /// nor the next line of today move that file over the earlier day's (rename replaces it).
    @Test func anEarlierDaysLineAfterTodaysNeverMovesAFileOverAnother() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("logs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = "127.0.0.1:7000"
        // Yesterday's session.
        var yesterday = WindowLogs(directory: directory.path)
        yesterday.write("#general <bob> evening", stamp: "2026-05-11 22:00:00", day: "2026-05-11", window: "#general", server: server)
        yesterday.write("#general <alice> good night", stamp: "2026-05-11 22:01:00", day: "2026-05-11", window: "#general", server: server)
        // This morning's: the join line, the backlog from yesterday, then live lines.
        var logs = WindowLogs(directory: directory.path)
        let written = [
            logs.write("-!- alice joined", stamp: "2026-05-12 08:00:00", day: "2026-05-12", window: "#general", server: server),
            logs.write("#general <bob> evening", stamp: "2026-05-11 22:00:00", day: "2026-05-11", window: "#general", server: server),
            logs.write("— live from here —", stamp: "2026-05-12 08:00:00", day: "2026-05-12", window: "#general", server: server),
            logs.write("#general <bob> morning", stamp: "2026-05-12 08:01:00", day: "2026-05-12", window: "#general", server: server),
        ]
        #expect(written == [true, true, true, true])
        let folder = directory.appendingPathComponent(server)
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files == ["#general.2026-05-11.log", "#general.log"], "no file under today's date while today is being written: \(files)")
        let old = (try? String(contentsOf: folder.appendingPathComponent("#general.2026-05-11.log"), encoding: .utf8)) ?? ""
        #expect(old == "2026-05-11 22:00:00 #general <bob> evening\n2026-05-11 22:01:00 #general <alice> good night\n",
                "yesterday's file keeps yesterday's session:\n\(old)")
        let today = (try? String(contentsOf: folder.appendingPathComponent("#general.log"), encoding: .utf8)) ?? ""
        #expect(today == """
            2026-05-12 08:00:00 -!- alice joined
            2026-05-11 22:00:00 #general <bob> evening
            2026-05-12 08:00:00 — live from here —
            2026-05-12 08:01:00 #general <bob> morning

            """, "today's file has every line of today's session, the backlog stamped with its own day:\n\(today)")
    }

    /// A backlog shown at every start is logged once: a line the log has (the same stamp and
    /// text) is left out, in yesterday's file too; one it lacks goes in its place by time.
    @Test func aBacklogIsLoggedOnceInTimeOrder() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("logs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = "127.0.0.1:7000"
        var first = WindowLogs(directory: directory.path)
        first.write("<bob> evening", stamp: "2026-05-11 22:00:00", day: "2026-05-11", window: "#general", server: server)
        first.write("<bob> morning", stamp: "2026-05-12 08:00:00", day: "2026-05-12", window: "#general", server: server)
        first.write("<bob> coffee?", stamp: "2026-05-12 08:05:00", day: "2026-05-12", window: "#general", server: server)
        // The next start: its join, then the backlog — two lines logged before, one said while
        // the client was not running — then a live line.
        var second = WindowLogs(directory: directory.path)
        let written = [
            second.write("-!- alice joined", stamp: "2026-05-12 09:00:00", day: "2026-05-12", window: "#general", server: server),
            second.write("<bob> evening", stamp: "2026-05-11 22:00:00", day: "2026-05-11", window: "#general", server: server, mayRepeat: true),
            second.write("<bob> morning", stamp: "2026-05-12 08:00:00", day: "2026-05-12", window: "#general", server: server, mayRepeat: true),
            second.write("<bob> anyone?", stamp: "2026-05-12 08:30:00", day: "2026-05-12", window: "#general", server: server, mayRepeat: true),
            second.write("<bob> coffee?", stamp: "2026-05-12 08:05:00", day: "2026-05-12", window: "#general", server: server, mayRepeat: true),
            second.write("<bob> hi alice", stamp: "2026-05-12 09:00:01", day: "2026-05-12", window: "#general", server: server),
        ]
        #expect(written == [true, true, true, true, true, true])
        let folder = directory.appendingPathComponent(server)
        let old = try String(contentsOf: folder.appendingPathComponent("#general.2026-05-11.log"), encoding: .utf8)
        #expect(old == "2026-05-11 22:00:00 <bob> evening\n", "yesterday's line stays once, in yesterday's file:\n\(old)")
        let today = try String(contentsOf: folder.appendingPathComponent("#general.log"), encoding: .utf8)
        #expect(today == """
            2026-05-12 08:00:00 <bob> morning
            2026-05-12 08:05:00 <bob> coffee?
            2026-05-12 08:30:00 <bob> anyone?
            2026-05-12 09:00:00 -!- alice joined
            2026-05-12 09:00:01 <bob> hi alice

            """, "each line once, in time order:\n\(today)")
    }

    @Test func anUnwritableDirectoryStopsLoggingWithOneReason() {
        var logs = WindowLogs(directory: "/proc/chat-client-test-logs")
        let first = logs.write("x", stamp: "2026-05-12 00:00:00", day: "2026-05-12", window: "#general", server: "s")
        #expect(!first)
        #expect(logs.failure?.contains("cannot write the log") == true && logs.failure?.contains("logging is off") == true)
        let second = logs.write("y", stamp: "2026-05-12 00:00:00", day: "2026-05-12", window: "#general", server: "s")
        #expect(!second, "and stays off")
    }
}
