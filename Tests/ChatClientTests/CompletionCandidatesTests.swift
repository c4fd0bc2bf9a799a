import ChatClient
import Testing

@Suite struct CompletionCandidatesTests {
    let nicks = ["Alice", "alfred", "bob", "{weird}|nick"]
    let rooms = ["general", "gamedev", "random"]

    private func complete(_ word: String, after line: String = "") -> [String] {
        CompletionCandidates.candidates(for: word, lineBefore: line, nicks: nicks, rooms: rooms)
    }

    @Test func completesCommandsAtTheStartOfTheLine() {
        #expect(complete("/jo") == ["/join"])
        #expect(complete("/h") == ["/history", "/help"], "every command with the prefix, in /help order")
        #expect(complete("/") .count == CommandSpec.all.count, "a bare slash offers every command")
    }

    @Test func completesNicksIgnoringCaseAndAddressesThemAtLineStart() {
        #expect(complete("al") == ["Alice:", "alfred:"], "case-insensitive, keeps the nick's spelling")
        #expect(complete("AL", after: "hey ") == ["Alice", "alfred"], "no colon in the middle of a line")
        #expect(complete("{w") == ["{weird}|nick:"], "nicks with punctuation complete too")
        #expect(complete("zed").isEmpty)
    }

    @Test func completesRoomsAfterAHashOrARoomCommand() {
        #expect(complete("#g", after: "see ") == ["#general", "#gamedev"])
        #expect(complete("ra", after: "/join ") == ["#random"], "the argument of /join is a room")
        #expect(complete("#r", after: "/part ") == ["#random"])
        #expect(complete("", after: "/switch ").count == 3, "an empty word offers every room")
    }

    @Test func completesTheRecipientOfMsgAsANick() {
        #expect(complete("b", after: "/msg ") == ["bob"], "a nick, without the line-start colon")
        #expect(complete("ra", after: "/msg bob ").isEmpty, "the message text completes nicks, not rooms")
    }

    @Test func completesCommandNamesForHelp() {
        #expect(complete("to", after: "/help ") == ["topic", "topiclock"])
    }

    @Test func commonPrefixIgnoresCaseDifferences() {
        #expect(CompletionCandidates.commonPrefix(of: ["Alice:", "alfred:"]) == "Al")
        #expect(CompletionCandidates.commonPrefix(of: ["/help", "/history"]) == "/h")
        #expect(CompletionCandidates.commonPrefix(of: []) == "")
    }
}
