import Testing
@testable import ChatProtocol
@Test func versionIsOne() { #expect(ChatProtocolVersion.current == 1) }
