package main

// Packages and -run patterns of the redis set.
var (
	pkRedis  = []string{"./storageguard/redisfence/"}
	runRedis = "" // redisfence: every test (redis-server on PATH)
)

// redisMutants are bugs planted in redisfence's Lua library and Go side:
// -set redis. The library is Lua inside a Go package, so each is a change
// to fence.lua or a Go file that redisfence's tests against a real
// redis-server must catch.
var redisMutants = []mutant{
	{ID: "RD-stale", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the library admits an older term",
		Original:    "    if ep.term < hi.term then",
		Replacement: "    if ep.term < hi.term - 1 then"},
	{ID: "RD-conflict", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the library admits the highest term with another leader",
		Original:    "    if ep.leader ~= hi.leader then",
		Replacement: "    if false then"},
	{ID: "RD-foreign", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the library admits another cluster's authentic token",
		Original:    "    if ep.cluster ~= CLUSTER then",
		Replacement: "    if false then"},
	{ID: "RD-noraise", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the library runs the commands without raising the fence key",
		Original:    "    if refusal then redis.call(\"SET\", fence, ep.text) end",
		Replacement: "    if refusal and ep.term < 0 then redis.call(\"SET\", fence, ep.text) end"},
	{ID: "RD-sig", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the library compares only the signature's first characters",
		Original:    "    for j = 1, #x do",
		Replacement: "    for j = 1, 4 do"},
	{ID: "RD-keyid", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "a token naming an unknown key ID is verified under the key without an ID",
		Original:    "    local k = HMAC[id]\n",
		Replacement: "    local k = HMAC[id] or HMAC[\"\"]\n"},
	{ID: "RD-plain", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the library admits unsigned tokens",
		Original:    "      if parsetext(token) then\n        return nil, \"TFUNSIGNED\"",
		Replacement: "      if parsetext(token) then\n        return parsetext(token)\n      end\n      if false then\n        return nil, \"TFUNSIGNED\""},
	{ID: "RD-maxterm", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the text form's term bound is off by one",
		Original:    "    if term > MAX_TERM then return nil end",
		Replacement: "    if term > MAX_TERM + 1 then return nil end"},
	{ID: "RD-leadzero", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "the text form accepts a term with a leading zero",
		Original:    "not sfind(digits, \"^[1-9][0-9]*$\")",
		Replacement: "not sfind(digits, \"^[0-9]+$\")"},
	{ID: "RD-badcall", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "a command may name the fence key",
		Original:    "      if j > 1 and v == fence then",
		Replacement: "      if false then"},
	{ID: "RD-cache", File: "storageguard/redisfence/fence.lua", Packages: pkRedis, Run: runRedis,
		What:        "a token whose signature failed is cached, and admitted when presented again",
		Original:    "      return nil, \"TFBADSIG\", \"signature does not verify\"",
		Replacement: "      cache[token] = parsetext(text)\n      return nil, \"TFBADSIG\", \"signature does not verify\""},
	{ID: "RD-durable", File: "storageguard/redisfence/fence.go", Packages: pkRedis, Run: runRedis,
		What:        "Open accepts appendfsync everysec",
		Original:    "m[\"appendfsync\"] != \"always\"",
		Replacement: "m[\"appendfsync\"] == \"no\""},
	{ID: "RD-stalemap", File: "storageguard/redisfence/errors.go", Packages: pkRedis, Run: runRedis,
		What:        "a stale refusal is reported as a conflict",
		Original:    "\t\treturn &storageguard.StaleError{Resource: resource, Presented: presented, Highest: highest}",
		Replacement: "\t\treturn &storageguard.ConflictError{Resource: resource, Presented: presented, Highest: highest}"},
	{ID: "RD-acl", File: "storageguard/redisfence/acl.go", Packages: pkRedis, Run: runRedis,
		What:        "the leaders' user may list functions with their code",
		Original:    "\"+fcall\", \"+fcall_ro\", \"+ping\"",
		Replacement: "\"+fcall\", \"+fcall_ro\", \"+function|list\", \"+ping\""},
}
