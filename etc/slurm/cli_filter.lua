--[[ slurm-liquid cli_filter: runs in the user's own sbatch (CliFilterPlugins=cli_filter/lua).

 For jobs that say what they train (#LIQUID lines or --comment="liquid: ..."), asks slurm-liquid
 what the job needs, prints it, and in [submit] mode = "adjust" rewrites the GPU, memory and CPU
 request. The helper gets the options in a private temporary file (no user text is ever put on a
 shell command line) and a hard time limit. Every failure leaves the job as the user asked it.
--]]

local HELPER = "/usr/local/bin/slurm-liquid"   -- edit if slurm-liquid is installed elsewhere
local TIME_LIMIT_S = 2                          -- seconds the helper may take
local OPTIONS = {"gres", "gpus", "gpus-per-node", "nodes", "mem", "mem-per-gpu", "mem-per-cpu",
                 "cpus-per-gpu", "cpus-per-task", "comment"}
local SETTABLE = {["gres"] = true, ["gpus"] = true, ["gpus-per-node"] = true, ["nodes"] = true,
                  ["mem"] = true, ["cpus-per-gpu"] = true, ["comment"] = true}

local function say(text)
    io.stderr:write(text .. "\n")
end

local function wants_liquid(options, script)
    local comment = options["comment"]
    if comment ~= nil and string.find(string.lower(comment), "^%s*liquid:") then
        return true
    end
    if script == nil then
        return false
    end
    local f = io.open(script, "r")
    if f == nil then
        return false
    end
    local text = f:read(1048576) or ""
    f:close()
    return string.find(string.upper(text), "\n%s*#LIQUID") ~= nil or string.find(string.upper(text), "^%s*#LIQUID") ~= nil
end

local function filter(options)
    -- srun and salloc pass through here too (job steps included): only batch submissions are sized.
    if options.type ~= "sbatch" then
        return
    end
    local script = options.argv and options.argv[1]
    if not wants_liquid(options, script) then
        return
    end
    local path = os.tmpname()   -- mode 0600, a name we made: the only thing on the command line
    local f = io.open(path, "w")
    if f == nil then
        return
    end
    if script ~= nil then
        f:write("script=", (string.gsub(script, "\n", " ")), "\n")
    end
    for _, key in ipairs(OPTIONS) do
        local value = options[key]
        if value ~= nil then
            f:write(key, "=", (string.gsub(tostring(value), "\n", " ")), "\n")
        end
    end
    f:close()
    local cmd = string.format("timeout -k 1 %d %s submit-filter --options %s 2>/dev/null", TIME_LIMIT_S, HELPER, path)
    local pipe = io.popen(cmd, "r")
    local out = pipe and pipe:read("*a") or ""
    if pipe then pipe:close() end
    os.remove(path)
    -- Only a complete answer counts: the helper ends it with "end" (a crash midway leaves none).
    if not string.find(out, "\nend\n$") and out ~= "end\n" then
        return
    end
    for line in string.gmatch(out, "[^\n]+") do
        local verb, rest = string.match(line, "^(%a+) (.*)$")
        if verb == "say" then
            say(rest)
        elseif verb == "set" then
            local key, value = string.match(rest, "^(%S+) (.*)$")
            if key ~= nil and SETTABLE[key] then
                options[key] = value
            end
        end
    end
end

function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
    local ok, err = pcall(filter, options)
    if not ok then
        say("slurm-liquid: cli_filter error (" .. tostring(err) .. "); the job is submitted as asked")
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    return slurm.SUCCESS
end
