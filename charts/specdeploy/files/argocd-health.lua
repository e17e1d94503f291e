-- Argo CD health check for specdeploy.io/SpeculativeDeployment.
-- Install: argocd-cm data key `resource.customizations.health.specdeploy.io_SpeculativeDeployment`
-- (docs/install.md). Reads only kstatus-style fields: metadata.generation,
-- status.observedGeneration and the standard conditions (Validated, Planned, Progressing,
-- Available, Ready). Tested in tests/unit/test_argocd_health.py.
local hs = {}

local function condition(conditions, kind)
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

if obj.status == nil or obj.status.conditions == nil or #obj.status.conditions == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

-- The status describes an older spec until the operator has observed the current generation.
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = obj.status.conditions
-- An invalid spec or an impossible plan needs a user edit: no amount of waiting fixes it.
-- (The last good workload keeps serving; Degraded says the new spec was refused.)
for _, kind in ipairs({"Validated", "Planned"}) do
  local c = condition(conditions, kind)
  if c ~= nil and c.status == "False" then
    hs.status = "Degraded"
    hs.message = kind .. "=False: " .. describe(c, "no reason given")
    return hs
  end
end

local ready = condition(conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end

-- A Ready condition computed from an older generation is stale.
if generation ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Ready was computed for generation " .. tostring(ready.observedGeneration)
  return hs
end

if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end

-- spec.replicas: 0 on purpose (the scale subresource, HPA/KEDA): nothing is wrong.
if ready.reason == "ScaledToZero" then
  hs.status = "Suspended"
  hs.message = describe(ready, "Scaled to zero")
  return hs
end

local progressing = condition(conditions, "Progressing")
if ready.status == "Unknown" or (progressing ~= nil and progressing.status == "True") then
  hs.status = "Progressing"
  if progressing ~= nil and progressing.status == "True" then
    hs.message = describe(progressing, "Rolling out")
  else
    hs.message = describe(ready, "Rolling out")
  end
  return hs
end

hs.status = "Degraded"
hs.message = "Ready=False: " .. describe(ready, "no reason given")
return hs
