import ChatServer
import Testing

/// The metrics port's request reader, without sockets: heads split anywhere, bounded in size.
struct HTTPRequestHeadTests {
    /// `text` fed in chunks of `size` bytes, with empty chunks between them; the last outcome.
    private func read(_ text: String, chunk size: Int, maxBytes: Int = 8192) -> HTTPRequestHead.Outcome {
        var reader = HTTPRequestHead.Reader(maxBytes: maxBytes)
        var outcome = HTTPRequestHead.Outcome.incomplete
        let bytes = Array(text.utf8)
        for start in stride(from: 0, to: bytes.count, by: size) {
            outcome = [UInt8]().withUnsafeBytes { reader.append($0) }
            outcome = bytes[start..<min(start + size, bytes.count)].withUnsafeBytes { reader.append($0) }
        }
        return outcome
    }

    @Test(arguments: [1, 2, 5, 8, 1000])
    func aHeadSplitAnywhereGivesItsMethodAndPath(chunk: Int) {
        let head = "GET /metrics?name=x HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"
        #expect(read(head, chunk: chunk) == .complete(HTTPRequestHead(method: "GET", path: "/metrics")))
        #expect(read("GET /status HTTP/1.0\n\n", chunk: chunk) == .complete(HTTPRequestHead(method: "GET", path: "/status")))
    }

    @Test func anUnfinishedHeadIsIncomplete() {
        #expect(read("GET /metrics HTTP/1.1\r\nHost: x\r\n", chunk: 3) == .incomplete)
    }

    @Test func aHeadPastTheBoundIsRefusedWithoutBufferingIt() {
        let long = "GET /metrics HTTP/1.1\r\nX: " + String(repeating: "a", count: 200) + "\r\n\r\n"
        #expect(read(long, chunk: 7, maxBytes: 100) == .invalid(status: 431))
        #expect(read(long, chunk: 7, maxBytes: 300) == .complete(HTTPRequestHead(method: "GET", path: "/metrics")))
    }

    @Test func whatIsNotHTTPOneIsABadRequest() {
        #expect(read("hello there\r\n\r\n", chunk: 4) == .invalid(status: 400))
        #expect(read("GET metrics HTTP/1.1\r\n\r\n", chunk: 4) == .invalid(status: 400))
        #expect(read("GET /metrics HTTP/2\r\n\r\n", chunk: 4) == .invalid(status: 400))
    }

    @Test func theResponseSaysItsLengthAndCloses() {
        let encoded = String(decoding: HTTPResponse(status: 200, text: "ok").encoded, as: UTF8.self)
        #expect(encoded == "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
    }
}
