import ChatProtocol

extension ChatCore {
    /// What is wrong with the core's own bookkeeping, one line per broken invariant; empty when
    /// every count agrees with what is held. For tests and the stateful fuzzer: it walks every
    /// client and room, so it is far too slow for the server's loop.
    ///
    /// Checked: the history's byte and entry totals equal the sum over the rooms, and stay within
    /// the budget; the connection counts agree per address and in all; every nick names a
    /// welcomed client that holds it; a room's members and the clients' room lists agree
    /// (for a server on its own; a cluster node's rooms are the cluster's, and its held frames
    /// are checked instead: `clusterProblems`).
    public func accountingProblems() -> [String] {
        var problems: [String] = []
        let roomBytes = rooms.values.reduce(0) { $0 + $1.history.bytes }
        let roomEntries = rooms.values.reduce(0) { $0 + $1.history.count }
        if roomBytes != historyBytes { problems.append("history bytes: counted \(historyBytes), held \(roomBytes)") }
        if roomEntries != historyEntries { problems.append("history entries: counted \(historyEntries), held \(roomEntries)") }
        if historyBytes > budget.history { problems.append("history bytes \(historyBytes) over the budget's \(budget.history)") }
        for (name, room) in rooms where room.history.bytes > budget.historyPerRoom {
            problems.append("#\(name) keeps \(room.history.bytes) history bytes, over the room bound \(budget.historyPerRoom)")
        }

        let live = clients.indices.filter { clients[$0] != nil }
        if live.count != clientCount { problems.append("client count: counted \(clientCount), held \(live.count)") }
        var perAddress: [String: Int] = [:]
        for slot in live { perAddress[clients[slot]?.address ?? "", default: 0] += 1 }
        for (address, state) in addresses where state.connections != (perAddress[address] ?? 0) {
            problems.append("\(address): counted \(state.connections) connections, held \(perAddress[address] ?? 0)")
        }
        for (address, count) in perAddress where addresses[address] == nil {
            problems.append("\(address): \(count) connections but no address state")
        }

        for (key, id) in nicks {
            // A node holds a nick for the client that claims it while the cluster's answer is
            // on its way: before its welcome, or besides its old nick, and after the client was
            // let go, until the answer comes (`clusterNickClaimed` releases it then).
            if isClustered, id.slot < clients.count, clients[id.slot] != nil, isClaiming(key, id) || cluster.departures[id] != nil {
                continue
            }
            guard id.slot < clients.count, let nick = clients[id.slot]?.nick else {
                problems.append("nick \(key) names slot \(id.slot), which has no welcomed client")
                continue
            }
            if ChatName.nickKey(nick) != key { problems.append("nick \(key) names slot \(id.slot), which holds \(nick)") }
        }
        guard !isClustered else { return problems + clusterProblems() }
        let welcomed = live.filter { clients[$0]?.nick != nil }
        if welcomed.count != nicks.count {
            problems.append("\(welcomed.count) welcomed clients but \(nicks.count) nicks held")
        }
        for slot in live {
            for name in clients[slot]?.rooms ?? [] where rooms[name]?.members.contains(ClientID(slot)) != true {
                problems.append("slot \(slot) lists #\(name) but is not among its members")
            }
        }
        for (name, room) in rooms {
            for member in room.members where member.slot >= clients.count || clients[member.slot]?.rooms.contains(name) != true {
                problems.append("#\(name) lists slot \(member.slot) as a member, which is not in it")
            }
            if Set(room.members).count != room.members.count { problems.append("#\(name) lists a member twice") }
        }
        return problems
    }

    /// A node's own counts: what each gate holds is counted right, what orphaned gates hold is
    /// within the budget's `held`, and only clients still here have gates or are members of the
    /// rooms it follows.
    private func clusterProblems() -> [String] {
        var problems: [String] = []
        for (id, gate) in cluster.gates {
            if id.slot >= clients.count || clients[id.slot] == nil { problems.append("slot \(id.slot) has a gate but no client") }
            let held = gate.held.reduce(0) { $0 + $1.cost }
            if held != gate.heldBytes { problems.append("slot \(id.slot)'s gate counts \(gate.heldBytes) bytes but holds \(held)") }
        }
        let orphaned = cluster.orphanedGates.values.reduce(0) { $0 + $1.heldBytes }
        if orphaned != cluster.orphanedBytes { problems.append("orphaned gates count \(cluster.orphanedBytes) bytes but hold \(orphaned)") }
        if orphaned > budget.held { problems.append("orphaned gates hold \(orphaned) bytes, over the budget's \(budget.held)") }
        for (name, room) in cluster.rooms {
            for member in room.members where member.slot >= clients.count || clients[member.slot] == nil {
                problems.append("#\(name) lists slot \(member.slot) as a member, which has no client")
            }
            if Set(room.members).count != room.members.count { problems.append("#\(name) lists a member twice") }
            for departed in room.departedJoins where cluster.sessions[departed.asker.id.slot] == departed.asker.session {
                problems.append("#\(name) keeps the join of slot \(departed.asker.id.slot) as a departed one's, but its session goes on")
            }
        }
        return problems
    }

    /// Whether `id` waits for the cluster's answer to its claim of the nick `key`.
    private func isClaiming(_ key: String, _ id: ClientID) -> Bool {
        switch cluster.awaiting[id] {
        case .hello(let nick, _), .nickChange(let nick): ChatName.nickKey(nick) == key
        default: false
        }
    }
}
