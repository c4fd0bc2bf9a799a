import ChatClient
import Testing

@Suite struct CommandParserTests {
    @Test func plainTextIsSaidInTheCurrentRoom() throws {
        #expect(try CommandParser.parse("hello there") == .say("hello there"), "plain text becomes .say")
    }

    @Test func blankLineDoesNothing() throws {
        #expect(try CommandParser.parse("   ") == nil, "a blank line is no command")
    }

    @Test func doubleSlashSaysTextStartingWithASlash() throws {
        #expect(try CommandParser.parse("//etc/hosts is a file") == .say("/etc/hosts is a file"))
    }

    @Test func joinTakesTheWireFormOfTheRoom() throws {
        #expect(try CommandParser.parse("/join #General") == .join(room: "general"), "# dropped, lowercased")
        #expect(try CommandParser.parse("/JOIN rust-lang") == .join(room: "rust-lang"), "command names ignore case")
    }

    @Test func joinRejectsABadRoomName() {
        #expect(throws: CommandError.invalidRoom("#bad!")) { try CommandParser.parse("/join #bad!") }
        #expect(throws: CommandError.usage("/join #room [key]")) { try CommandParser.parse("/join") }
    }

    @Test func partAndWhoDefaultToTheCurrentRoom() throws {
        #expect(try CommandParser.parse("/part") == .part(room: nil))
        #expect(try CommandParser.parse("/part #Random") == .part(room: "random"))
        #expect(try CommandParser.parse("/who") == .who(room: nil))
        #expect(try CommandParser.parse("/who #x") == .who(room: "x"))
    }

    @Test func msgSplitsTheNickFromTheText() throws {
        #expect(try CommandParser.parse("/msg bob  hi  there ") == .tell(nick: "bob", text: "hi  there"),
                "the text keeps its inner spaces")
        #expect(throws: CommandError.usage("/msg nick text")) { try CommandParser.parse("/msg bob") }
        #expect(throws: CommandError.invalidNick("9lives")) { try CommandParser.parse("/msg 9lives hi") }
    }

    @Test func meNickAndSwitch() throws {
        #expect(try CommandParser.parse("/me waves ✋") == .emote("waves ✋"))
        #expect(try CommandParser.parse("/nick alice_") == .changeNick("alice_"))
        #expect(throws: CommandError.usage("/nick newnick")) { try CommandParser.parse("/nick al ice") }
        #expect(try CommandParser.parse("/switch #Dev") == .switchRoom("dev"))
    }

    @Test func topicShowsSetsAndClears() throws {
        #expect(try CommandParser.parse("/topic") == .showTopic)
        #expect(try CommandParser.parse("/topic Swift sockets") == .setTopic("Swift sockets"))
        #expect(try CommandParser.parse("/topic -clear") == .setTopic(""))
    }

    @Test func historyTakesAnOptionalPositiveCount() throws {
        #expect(try CommandParser.parse("/history") == .history(count: CommandParser.defaultHistoryCount))
        #expect(try CommandParser.parse("/history 5") == .history(count: 5))
        #expect(throws: CommandError.usage("/history [count]")) { try CommandParser.parse("/history lots") }
        #expect(throws: CommandError.usage("/history [count]")) { try CommandParser.parse("/history 0") }
    }

    @Test func quitHasADefaultReason() throws {
        #expect(try CommandParser.parse("/quit") == .quit(reason: CommandParser.defaultQuitReason))
        #expect(try CommandParser.parse("/quit off to lunch") == .quit(reason: "off to lunch"))
    }

    @Test func roomsAndHelp() throws {
        #expect(try CommandParser.parse("/rooms") == .listRooms)
        #expect(try CommandParser.parse("/help") == .help(topic: nil))
        #expect(try CommandParser.parse("/help /msg") == .help(topic: "msg"))
    }

    @Test func unknownCommandIsReportedWithAHint() {
        #expect(throws: CommandError.unknownCommand("frobnicate")) { try CommandParser.parse("/frobnicate now") }
        #expect(CommandError.unknownCommand("x").description.contains("/help"), "the error points to /help")
    }
}

@Suite struct NewCommandParserTests {
    @Test func queryAwayAndIgnore() throws {
        #expect(try CommandParser.parse("/query bob") == .query("bob"))
        #expect(throws: CommandError.usage("/query nick")) { try CommandParser.parse("/query") }
        #expect(try CommandParser.parse("/away gone to lunch") == .away("gone to lunch"))
        #expect(try CommandParser.parse("/away") == .away(""), "no message: back")
        #expect(try CommandParser.parse("/ignore") == .ignore(nil))
        #expect(try CommandParser.parse("/ignore bob") == .ignore("bob"))
        #expect(throws: CommandError.invalidNick("9x")) { try CommandParser.parse("/ignore 9x") }
        #expect(try CommandParser.parse("/unignore bob") == .unignore("bob"))
    }
}

@Suite struct DayTwoCommandTests {
    @Test func aPasswordOnTheCommandLineIsKnownSoItIsNotKept() {
        #expect(CommandParser.holdsSecret("/register hunter2"))
        #expect(CommandParser.holdsSecret("/LOGIN alice hunter2"))
        #expect(!CommandParser.holdsSecret("/register"))
        #expect(!CommandParser.holdsSecret("/login alice"))
        #expect(!CommandParser.holdsSecret("//register hunter2"), "text that starts with a slash is said, not a command")
        #expect(!CommandParser.holdsSecret("register hunter2"))
    }

    @Test func windowGotoActiveAndWindowCompletion() throws {
        #expect(try CommandParser.parse("/window goto active") == .window(.active))
        #expect(try CommandParser.parse("/w goto 3") == .window(.number(3)))
        #expect(try CommandParser.parse("/window goto #dev") == .window(.named("#dev")))
        #expect(CompletionCandidates.candidates(for: "", lineBefore: "/window ", nicks: ["bob"], rooms: ["general", "ops"], windows: ["#general", "bob"])
                == ["list", "close", "goto", "#general", "bob"], "the open windows, not every room known")
        #expect(CompletionCandidates.candidates(for: "", lineBefore: "hello ", nicks: ["bob"], rooms: []).isEmpty,
                "an empty word after text completes nothing")
        #expect(CompletionCandidates.candidates(for: "", lineBefore: "/msg ", nicks: ["bob", "carol"], rooms: []) == ["bob", "carol"])
    }
}
