--[[ slurm-liquid job_submit: runs inside slurmctld (JobSubmitPlugins=lua), under its locks.

 Cheap and safe by construction: string checks, one small local file read, one small file write.
 It never runs a command, never blocks, and never rejects a job because of slurm-liquid.

 A job that opted in (#LIQUID lines in its script, or a Comment starting with "liquid") gets the
 trusted tag "liquid/1 state=..." in its AdminComment, which users cannot write. When the daemon is
 alive (its heartbeat file is fresh) and in enforce mode, the job is held for it with a lease:
 its begin time is pushed out by lease_s seconds. The daemon places and starts it, or renews the
 lease while it waits for GPUs; if the daemon dies, the lease runs out and Slurm starts the job
 as the user asked. The daemon is woken by touching a file in its spool directory.
--]]

local SPOOL = "/var/spool/slurm-liquid"    -- [daemon] spool_dir of liquid.toml
local VERSION = "liquid/1"
local COMMENT_LIMIT = 1024

local function opted_in(job_desc)
    local comment = job_desc.comment
    if comment ~= nil and string.find(comment, "^%s*liquid") then
        return true
    end
    local script = job_desc.script
    if script == nil then
        return false
    end
    return string.find(script, "\n%s*#[Ll][Ii][Qq][Uu][Ii][Dd]") ~= nil
end

-- heartbeat: "<unix time> <mode> <lease_s> <stale_after_s>", written by the daemon
local function daemon_state()
    local f = io.open(SPOOL .. "/heartbeat", "r")
    if f == nil then
        return nil
    end
    local line = f:read("*l")
    f:close()
    if line == nil then
        return nil
    end
    local beat, mode, lease, stale = string.match(line, "^(%d+) (%a+) (%d+) (%d+)")
    if beat == nil or os.time() - tonumber(beat) > tonumber(stale) then
        return nil
    end
    return {mode = mode, lease = tonumber(lease)}
end

local function wake_daemon()
    local f = io.open(SPOOL .. "/events/submitted", "w")
    if f ~= nil then
        f:close()
    end
end

local function submit(job_desc)
    if not opted_in(job_desc) then
        return
    end
    if job_desc.comment ~= nil and string.len(job_desc.comment) > COMMENT_LIMIT then
        slurm.log_info("slurm-liquid: job of uid %s has a %d-character comment; Slurm will refuse it",
                       tostring(job_desc.user_id), string.len(job_desc.comment))
        return
    end
    local daemon = daemon_state()
    local state = "untouched"
    if daemon ~= nil and daemon.mode == "enforce" then
        local begin = job_desc.begin_time
        -- A job the user asked to start later keeps its own begin time.
        if begin == nil or begin == 0 or begin <= os.time() then
            job_desc.begin_time = os.time() + daemon.lease
            state = "held"
        end
    elseif daemon ~= nil and daemon.mode == "shadow" then
        state = "shadow"
    end
    local tag = VERSION .. " state=" .. state
    local admin = job_desc.admin_comment
    if admin ~= nil and admin ~= "" then
        tag = tag .. "; " .. admin
    end
    job_desc.admin_comment = string.sub(tag, 1, COMMENT_LIMIT)
    if state ~= "untouched" then
        wake_daemon()
    end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, err = pcall(submit, job_desc)
    if not ok then
        slurm.log_error("slurm-liquid: job_submit.lua error (%s); job left as submitted", tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
