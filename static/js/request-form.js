// Live cost preview of the new-request form.
//
// Reads the pools, profiles, tenant policies and quota balances the page embeds (json_script
// "request-form-data"), keeps the profile list to the chosen pool's profiles, and shows, as the user
// types, what the request costs (compute slices, memory slots, GPU-equivalents), what quota is left
// after it, and whether it would be approved at once or go to a manager. It only mirrors the rules of
// allocations.services.request_allocation for display; the server decides on submit.
(function () {
  "use strict";

  var dataNode = document.getElementById("request-form-data");
  var form = document.getElementById("request-form");
  if (!dataNode || !form) {
    return;
  }
  var data = JSON.parse(dataNode.textContent);
  var el = function (id) {
    return document.getElementById(id);
  };
  var tenantInput = form.elements.namedItem("tenant");
  var poolSelect = form.elements.namedItem("pool");
  var profileSelect = form.elements.namedItem("profile");
  var countInput = form.elements.namedItem("count");
  var leaseInput = form.elements.namedItem("lease_hours");

  function byId(list, id) {
    for (var i = 0; i < list.length; i++) {
      if (String(list[i].id) === String(id)) {
        return list[i];
      }
    }
    return null;
  }

  function currentPool() {
    return byId(data.pools, poolSelect.value);
  }

  function currentTenant() {
    return byId(data.tenants, tenantInput.value);
  }

  function currentProfile(pool) {
    if (!pool) {
      return null;
    }
    for (var i = 0; i < pool.profiles.length; i++) {
      if (pool.profiles[i].name === profileSelect.value) {
        return pool.profiles[i];
      }
    }
    return null;
  }

  function plural(n, one, many) {
    return n + " " + (n === 1 ? one : many);
  }

  function gpuEq(pool, compute, memory) {
    return Math.max(compute / pool.compute_slices, memory / pool.memory_slices);
  }

  function fmt(x) {
    return x.toFixed(2);
  }

  function wholeNumber(input) {
    var raw = input.value.trim();
    return /^\d+$/.test(raw) ? parseInt(raw, 10) : null;
  }

  function setText(id, text) {
    var node = el(id);
    if (node) {
      node.textContent = text;
    }
  }

  // Keep only the chosen pool's profiles in the profile list (the page lists every pool's without script).
  function rebuildProfiles() {
    var pool = currentPool();
    if (!pool) {
      return;
    }
    var previous = profileSelect.value;
    while (profileSelect.firstChild) {
      profileSelect.removeChild(profileSelect.firstChild);
    }
    pool.profiles.forEach(function (p) {
      var label =
        p.name + " — " + plural(p.compute_slices, "compute slice", "compute slices") + ", " +
        plural(p.memory_slices, "memory slot", "memory slots") + (p.memory_gib ? ", " + p.memory_gib + " GiB" : "");
      var option = new Option(label, p.name);
      option.selected = p.name === previous;
      profileSelect.appendChild(option);
    });
  }

  // Why the request would not fit the remaining quota, or null: quota_shortfall() in services/quotas.py.
  function shortfall(quota, pool, profile, count, compute, memory) {
    if (!quota) {
      return "Your tenant has no quota in " + pool.name + ".";
    }
    var freeCompute = quota.compute_limit - quota.compute_used;
    var freeMemory = quota.memory_limit - quota.memory_used;
    if (compute > freeCompute) {
      return "It needs " + compute + " compute slices; " + Math.max(freeCompute, 0) + " of " + quota.compute_limit + " are free.";
    }
    if (memory > freeMemory) {
      return "It needs " + memory + " memory slots; " + Math.max(freeMemory, 0) + " of " + quota.memory_limit + " are free.";
    }
    var cap = quota.profile_caps[profile.name];
    if (cap !== undefined) {
      var held = quota.held[profile.name] || 0;
      if (held + count > cap) {
        return "Your tenant may hold at most " + cap + " × " + profile.name + "; " + held + " are held.";
      }
    }
    return null;
  }

  function verdict(kind, title, reason) {
    var box = el("cost-verdict");
    box.className = "verdict verdict--" + kind;
    setText("verdict-title", title);
    setText("verdict-reason", reason);
  }

  function update() {
    var pool = currentPool();
    var tenant = currentTenant();
    var profile = currentProfile(pool);
    if (!pool || !tenant) {
      return;
    }
    var count = wholeNumber(countInput);
    var lease = wholeNumber(leaseInput);
    var n = count === null ? 0 : count;
    var compute = profile ? profile.compute_slices * n : 0;
    var memory = profile ? profile.memory_slices * n : 0;
    var quota = tenant.quotas[String(pool.id)] || null;

    setText("model-name", pool.gpu_model);
    setText("model-compute", String(pool.compute_slices));
    setText("model-memory", String(pool.memory_slices));
    form.parentNode.querySelectorAll(".model-compute").forEach(function (node) {
      node.textContent = String(pool.compute_slices);
    });
    form.parentNode.querySelectorAll(".model-memory").forEach(function (node) {
      node.textContent = String(pool.memory_slices);
    });
    setText("cost-compute", String(compute));
    setText("cost-memory", String(memory));
    setText("cost-gpu", fmt(gpuEq(pool, compute, memory)));
    setText("profile-info", profile
      ? "Each " + profile.name + " slice takes " + plural(profile.compute_slices, "compute slice", "compute slices") +
        " and " + plural(profile.memory_slices, "memory slot", "memory slots") + " of a " + pool.gpu_model + "."
      : "");

    setText("quota-scope", tenant.name + " in " + pool.name);
    var freeCompute = quota ? Math.max(quota.compute_limit - quota.compute_used, 0) : 0;
    var freeMemory = quota ? Math.max(quota.memory_limit - quota.memory_used, 0) : 0;
    setText("quota-compute-free", String(freeCompute));
    setText("quota-compute-limit", String(quota ? quota.compute_limit : 0));
    setText("quota-memory-free", String(freeMemory));
    setText("quota-memory-limit", String(quota ? quota.memory_limit : 0));
    setText("quota-gpu-free", fmt(gpuEq(pool, freeCompute, freeMemory)));
    var afterCompute = freeCompute - compute;
    var afterMemory = freeMemory - memory;
    setText("after-compute", afterCompute >= 0 ? String(afterCompute) : "short by " + -afterCompute);
    setText("after-memory", afterMemory >= 0 ? String(afterMemory) : "short by " + -afterMemory);
    setText("after-gpu", afterCompute >= 0 && afterMemory >= 0 ? fmt(gpuEq(pool, afterCompute, afterMemory)) : "—");
    el("after-compute").classList.toggle("is-short", afterCompute < 0);
    el("after-memory").classList.toggle("is-short", afterMemory < 0);

    leaseInput.max = String(tenant.max_lease_hours);
    countInput.max = String(data.max_count);
    setText("lease-help",
      "Up to " + tenant.max_lease_hours + " hours for " + tenant.name + "; leases up to " +
      tenant.auto_approve_max_lease_hours + " hours can be approved automatically.");

    if (!profile) {
      verdict("invalid", "Choose a MIG profile.", "");
    } else if (count === null || count < 1 || count > data.max_count) {
      verdict("invalid", "Cannot be submitted as it is.", "Ask for between 1 and " + data.max_count + " slices.");
    } else if (lease === null || lease < 1 || lease > tenant.max_lease_hours) {
      verdict("invalid", "Cannot be submitted as it is.",
        "The lease must be between 1 and " + tenant.max_lease_hours + " hours for " + tenant.name + ".");
    } else {
      var missing = shortfall(quota, pool, profile, count, compute, memory);
      if (missing) {
        verdict("manager", "Goes to a manager: it does not fit the remaining quota.",
          missing + " A manager can approve it once quota is free or raised.");
      } else if (compute > tenant.auto_approve_max_compute_slices) {
        verdict("manager", "Goes to a manager for approval.",
          "It costs more than " + plural(tenant.auto_approve_max_compute_slices, "compute slice", "compute slices") +
          ", the most " + tenant.name + " approves automatically.");
      } else if (lease > tenant.auto_approve_max_lease_hours) {
        verdict("manager", "Goes to a manager for approval.",
          "Leases over " + tenant.auto_approve_max_lease_hours + " hours need a manager in " + tenant.name + ".");
      } else {
        verdict("auto", "Approved automatically.",
          "It fits the remaining quota and " + tenant.name + "’s auto-approve policy.");
      }
    }
  }

  poolSelect.addEventListener("change", function () {
    rebuildProfiles();
    update();
  });
  [tenantInput, profileSelect, countInput, leaseInput].forEach(function (input) {
    input.addEventListener("input", update);
    input.addEventListener("change", update);
  });
  function describeBy(input, id) {
    var ids = (input.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
    if (ids.indexOf(id) < 0) {
      ids.push(id);
    }
    input.setAttribute("aria-describedby", ids.join(" "));
  }
  describeBy(leaseInput, "lease-help");
  describeBy(profileSelect, "profile-info");
  rebuildProfiles();
  update();
  el("cost-preview").hidden = false;
})();
