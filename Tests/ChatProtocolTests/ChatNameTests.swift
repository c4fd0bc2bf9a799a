import ChatProtocol
import Testing

@Suite("Name rules")
struct ChatNameTests {
    @Test("valid nicks", arguments: ["a", "Alice", "bob_99", "[away]", "x-y", "`^{}|\\", String(repeating: "n", count: 24)])
    func acceptsValidNicks(nick: String) throws {
        try ChatName.validateNick(nick)
        #expect(ChatName.isValidNick(nick))
    }

    @Test("invalid nicks", arguments: [
        ("", NameProblem.empty), (String(repeating: "n", count: 25), .tooLong), ("9lives", .invalidFirstCharacter),
        ("-dash", .invalidFirstCharacter), ("two words", .invalidCharacter), ("émile", .invalidCharacter),
        ("a@b", .invalidCharacter), ("#room", .invalidCharacter),
    ])
    func rejectsInvalidNicks(nick: String, problem: NameProblem) {
        #expect(throws: FrameError.badName(.nick, problem)) { try ChatName.validateNick(nick) }
        #expect(!ChatName.isValidNick(nick))
    }

    @Test("valid rooms", arguments: ["general", "a", "swift-6", "team_b", "0", String(repeating: "r", count: 32)])
    func acceptsValidRooms(room: String) throws {
        try ChatName.validateRoom(room)
        #expect(ChatName.isValidRoom(room))
    }

    @Test("invalid rooms", arguments: [
        ("", NameProblem.empty), (String(repeating: "r", count: 33), .tooLong), ("General", .invalidCharacter),
        ("#general", .invalidCharacter), ("a b", .invalidCharacter), ("ü", .invalidCharacter),
    ])
    func rejectsInvalidRooms(room: String, problem: NameProblem) {
        #expect(throws: FrameError.badName(.room, problem)) { try ChatName.validateRoom(room) }
    }

    @Test func normalizesWhatUsersTypeIntoTheWireFormOfARoom() throws {
        #expect(try ChatName.normalizedRoom("#General") == "general")
        #expect(try ChatName.normalizedRoom("Swift-6") == "swift-6")
        #expect(throws: FrameError.badName(.room, .empty)) { try ChatName.normalizedRoom("#") }
        #expect(throws: FrameError.badName(.room, .invalidCharacter)) { try ChatName.normalizedRoom("##x") }
    }

    @Test func nickKeysIgnoreAsciiCaseOnly() {
        #expect(ChatName.nickKey("Alice") == ChatName.nickKey("aLICE"))
        #expect(ChatName.nickKey("[x]") != ChatName.nickKey("{x}"), "brackets are not letters")
    }
}
