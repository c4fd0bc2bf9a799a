import ChatProtocol
import TestSupport

// Readers of the answers to account requests, for the account tests of every mode
// (`AccountTests`, `ClusterAccountTests`).

/// The answer to `client`'s `register`: `registered`, or the error refusing it.
func registration(of client: TestClient) async throws -> Frame {
    try await client.waitFor("the answer to register") { frame -> Frame? in
        switch frame {
        case .registered, .error: frame
        default: nil
        }
    }
}

/// The code of the next `error` from `socket` (skipping welcome, limits and the like), or nil
/// if the connection ends or stays silent.
func errorCode(from socket: BlockingSocket) async -> ErrorCode? {
    for _ in 0..<16 {
        guard let frame = await socket.nextFrame() else { return nil }
        if case .error(let code, _, _, _) = frame { return code }
    }
    return nil
}

/// The next frame from `socket` that answers an account request: an account frame or an error.
func answer(from socket: BlockingSocket) async -> Frame {
    for _ in 0..<16 {
        guard let frame = await socket.nextFrame() else { break }
        switch frame {
        case .registered, .loggedIn, .passwordChanged, .accountDropped, .error: return frame
        default: continue
        }
    }
    return .goodbye(reason: "no answer")
}

/// Frames from `socket` up to the one `last` accepts (or an error, or the end), in order.
func frames(from socket: BlockingSocket, until last: (Frame) -> Bool) async -> [Frame] {
    var seen: [Frame] = []
    for _ in 0..<32 {
        guard let frame = await socket.nextFrame() else { break }
        seen.append(frame)
        if last(frame) { break }
        if case .error = frame { break }
    }
    return seen
}
