import ChatClient
import ChatProtocol

// What the session-level tests read out of a `ClientSession`'s actions, written once for all.

/// The frames `actions` send, in order.
func frames(_ actions: [SessionAction]) -> [Frame] {
    actions.flatMap { action -> [Frame] in
        if case .send(let frames) = action { return frames }
        return []
    }
}

/// The events `actions` show, in order.
func events(_ actions: [SessionAction]) -> [ChatEvent] {
    actions.compactMap { action in
        if case .show(let event) = action { return event }
        return nil
    }
}
